// convert-hf: binds every GGUF table entry to its source tensor(s), checks shapes, then streams
// the data in file order, a bounded number of rows at a time (the Flash checkpoint does not
// fit in memory as floats).
#include "convert/convert_hf.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>

#include "convert/fp8_fp4.h"
#include "convert/hf_config.h"
#include "convert/hf_names.h"
#include "convert/metadata.h"
#include "convert/qwen35moe_convert.h"
#include "convert/row_encode.h"
#include "convert/safetensors.h"
#include "core/error.h"
#include "gguf/gguf.h"

namespace ds4::convert {

namespace fs = std::filesystem;

namespace {

// Where the data of one GGUF tensor comes from.
struct Source {
  const StTensor* whole = nullptr;
  std::vector<const StTensor*> experts;  // per-expert slabs
  const StTensor* stack = nullptr;       // transformers' stacked experts
  int stack_half = 0;                    // gate_up_proj: 0 = gate rows, 1 = up rows
  std::vector<std::string> hf_names;
  // FP8/FP4 block scales of `whole` / of each expert (official release), else null.
  const StTensor* whole_scale = nullptr;
  std::vector<const StTensor*> expert_scales;
  std::vector<std::string> scale_names;
};

// The weight (and its scale) that holds slab `slab` of a planned tensor, for the per-source
// readers below; stacked transformers tensors are never FP8/FP4.
struct SlabSource {
  const StTensor* weight;
  const StTensor* scale;
  uint64_t first_row;  // of the weight's [out, in] matrix
};

std::string shape_str(const std::vector<uint64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

std::vector<std::string> safetensors_files(const fs::path& dir) {
  std::vector<std::string> files;
  const fs::path index = dir / "model.safetensors.index.json";
  if (fs::exists(index)) {
    std::ifstream in(index);
    std::stringstream ss;
    ss << in.rdbuf();
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(ss.str());
    } catch (const nlohmann::json::exception& e) {
      fail("{}: not valid JSON: {}", index.string(), e.what());
    }
    if (!j.contains("weight_map") || !j["weight_map"].is_object()) fail("{}: no weight_map object", index.string());
    std::set<std::string> names;
    for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
      if (!it.value().is_string()) fail("{}: weight_map['{}'] is not a file name", index.string(), it.key());
      std::string f = it.value().get<std::string>();
      if (f.find('/') != std::string::npos || f.find("..") != std::string::npos)
        fail("{}: weight_map names file '{}' outside the directory", index.string(), f);
      names.insert(f);
    }
    for (const auto& f : names) files.push_back((dir / f).string());
  } else {
    for (const auto& e : fs::directory_iterator(dir))
      if (e.is_regular_file() && e.path().extension() == ".safetensors") files.push_back(e.path().string());
    std::sort(files.begin(), files.end());
  }
  if (files.empty()) fail("{}: no .safetensors files", dir.string());
  return files;
}

// Rows of one slab of a planned tensor as floats. A 2-D tensor is one slab; a 3-D expert
// tensor has ne[2] slabs of ne[1] rows.
void read_rows(const TensorPlan& p, const Source& s, uint64_t slab, uint64_t row0, uint64_t nrows, float* dst) {
  const uint64_t ne0 = p.ne[0];
  uint64_t rows_per_slab = 1;
  for (size_t d = 1; d < p.ne.size() && (p.ne.size() < 3 || d < 2); ++d) rows_per_slab *= p.ne[d];
  const StTensor* scale = s.whole ? s.whole_scale : !s.expert_scales.empty() ? s.expert_scales[slab] : nullptr;
  if (scale) {
    const StTensor& w = s.whole ? *s.whole : *s.experts[slab];
    const uint64_t first = s.whole ? slab * rows_per_slab + row0 : row0;
    if (is_fp8(w))
      decode_fp8_rows(w, *scale, ne0, first, nrows, dst);
    else
      decode_fp4_rows(w, *scale, ne0, first, nrows, dst);
  } else if (s.whole) {
    to_f32(*s.whole, (slab * rows_per_slab + row0) * ne0, nrows * ne0, dst);
  } else if (!s.experts.empty()) {
    to_f32(*s.experts[slab], row0 * ne0, nrows * ne0, dst);
  } else {
    const uint64_t ne1 = p.ne[1];
    const uint64_t slab_rows = p.role == Role::ExpertGateUp ? 2 * ne1 : ne1;
    const uint64_t first_row = slab * slab_rows + static_cast<uint64_t>(s.stack_half) * ne1 + row0;
    to_f32(*s.stack, first_row * ne0, nrows * ne0, dst);
  }
}

}  // namespace

ConvertReport convert_hf(const ConvertOptions& o) {
  auto log = [&](const std::string& line) {
    if (o.log) o.log(line);
  };
  const fs::path dir(o.hf_dir);
  if (!fs::is_directory(dir)) fail("{}: not a directory", o.hf_dir);
  if (is_qwen35moe_config((dir / "config.json").string())) return convert_qwen35moe(o);
  ModelShape shape = read_hf_config((dir / "config.json").string());
  if (shape.name.empty()) shape.name = dir.filename().string();
  std::vector<TensorPlan> plan = plan_tensors(shape, o.recipe);
  ConvertReport rep;

  std::vector<std::unique_ptr<SafetensorsFile>> files;
  for (const auto& f : safetensors_files(dir)) files.push_back(std::make_unique<SafetensorsFile>(SafetensorsFile::open(f)));

  // Bind sources.
  std::map<std::string, Source> sources;
  std::map<std::string, std::string> seen_hf;  // hf name -> file, to catch cross-shard duplicates
  std::string gate_up_companion;
  for (const auto& f : files) {
    for (const auto& t : f->tensors()) {
      if (auto [it, fresh] = seen_hf.emplace(t.name, f->path()); !fresh)
        fail("tensor '{}' appears in both {} and {}", t.name, it->second, f->path());
      MappedName m = map_hf_name(t.name);
      if (m.kind == MappedName::Kind::Ignored) {
        rep.notes.push_back("ignored " + t.name + " (MTP lives in a separate GGUF)");
        continue;
      }
      if (m.layer >= 0 && static_cast<uint32_t>(m.layer) >= shape.n_layers)
        fail("{}: tensor '{}' belongs to layer {}, but config.json has {} layers", f->path(), t.name, m.layer,
             shape.n_layers);
      auto bind_whole = [&](const std::string& g, const StTensor* st, int half, bool stacked) {
        Source& s = sources[g];
        if (s.whole || s.stack || !s.experts.empty())
          fail("GGUF tensor {} would come from both '{}' and '{}'", g, s.hf_names.front(), t.name);
        if (stacked) {
          s.stack = st;
          s.stack_half = half;
        } else {
          s.whole = st;
        }
        s.hf_names.push_back(t.name);
      };
      switch (m.kind) {
        case MappedName::Kind::Whole:
          bind_whole(m.gguf, &t, 0, false);
          break;
        case MappedName::Kind::DownStack:
          bind_whole(m.gguf, &t, 0, true);
          break;
        case MappedName::Kind::GateUpStack: {
          bind_whole(m.gguf, &t, 0, true);
          std::string up = m.gguf;
          up.replace(up.find("ffn_gate_exps"), 13, "ffn_up_exps");
          bind_whole(up, &t, 1, true);
          break;
        }
        case MappedName::Kind::Expert: {
          Source& s = sources[m.gguf];
          if (s.whole || s.stack) fail("GGUF tensor {} would come from both '{}' and '{}'", m.gguf, s.hf_names.front(), t.name);
          if (static_cast<uint32_t>(m.expert) >= shape.n_experts)
            fail("{}: tensor '{}' is expert {}, but config.json has {} experts", f->path(), t.name, m.expert,
                 shape.n_experts);
          s.experts.resize(shape.n_experts, nullptr);
          if (s.experts[m.expert]) fail("expert tensor '{}' given twice", t.name);
          s.experts[m.expert] = &t;
          s.hf_names.push_back(t.name);
          break;
        }
        case MappedName::Kind::Scale: {
          Source& s = sources[m.gguf];
          if (s.whole_scale) fail("GGUF tensor {} has two scale tensors, '{}' and '{}'", m.gguf, s.scale_names.front(), t.name);
          s.whole_scale = &t;
          s.scale_names.push_back(t.name);
          break;
        }
        case MappedName::Kind::ExpertScale: {
          Source& s = sources[m.gguf];
          if (static_cast<uint32_t>(m.expert) >= shape.n_experts)
            fail("{}: tensor '{}' is expert {}, but config.json has {} experts", f->path(), t.name, m.expert,
                 shape.n_experts);
          s.expert_scales.resize(shape.n_experts, nullptr);
          if (s.expert_scales[m.expert]) fail("expert scale tensor '{}' given twice", t.name);
          s.expert_scales[m.expert] = &t;
          s.scale_names.push_back(t.name);
          break;
        }
        case MappedName::Kind::Ignored:
          break;
      }
    }
  }

  // Every planned tensor needs a source of the right shape; every source must be planned.
  std::set<std::string> planned;
  for (auto& p : plan) {
    planned.insert(p.name);
    auto it = sources.find(p.name);
    if (it == sources.end())
      fail("{}: no tensor for GGUF {} {} (layer {}, compress ratio {})", o.hf_dir, p.name, shape_str(p.ne), p.layer,
           p.layer >= 0 ? shape.compress_ratios[p.layer] : 0);
    const Source& s = it->second;
    if (s.hf_names.empty()) fail("{}: scale tensor '{}' has no weight tensor", o.hf_dir, s.scale_names.front());
    auto check = [&](const StTensor& st, std::vector<uint64_t> want_torch, const StTensor* scale) {
      const uint64_t out = want_torch.size() == 2 ? want_torch[0] : 0, in = want_torch.back();
      if (is_fp8(st) || is_fp4(st)) {
        if (!scale)
          fail("{}: tensor '{}' is {} but has no '.scale' block-scale tensor", st.file, st.name, st_dtype_name(st.dtype));
        if (want_torch.size() != 2) fail("{}: tensor '{}': FP8/FP4 is supported for 2-D weights only", st.file, st.name);
        if (is_fp4(st)) {
          if (in % 2 != 0) fail("{}: FP4 tensor '{}' for GGUF {} needs an even input count, got {}", st.file, st.name, p.name, in);
          want_torch.back() = in / 2;
        }
        if (st.shape != want_torch)
          fail("{}: tensor '{}' has shape {}, expected {} (packed {}) for GGUF {} {}", st.file, st.name, shape_str(st.shape),
               shape_str(want_torch), st_dtype_name(st.dtype), p.name, shape_str(p.ne));
        if (is_fp8(st))
          check_fp8_scale(st, *scale, out, in);
        else
          check_fp4_scale(st, *scale, out, in);
        return;
      }
      if (scale)
        fail("{}: tensor '{}' has a block-scale tensor '{}' but dtype {} (expected F8_E4M3, or I8/U8 FP4)", st.file,
             st.name, scale->name, st_dtype_name(st.dtype));
      if (st.shape != want_torch)
        fail("{}: tensor '{}' has shape {}, expected {} for GGUF {} {}", st.file, st.name, shape_str(st.shape),
             shape_str(want_torch), p.name, shape_str(p.ne));
      if (p.role == Role::Tid2eid) {
        if (st.dtype != StDtype::I64 && st.dtype != StDtype::I32)
          fail("{}: tensor '{}' has dtype {}, expected I64 or I32", st.file, st.name, st_dtype_name(st.dtype));
      } else if (st.dtype != StDtype::F32 && st.dtype != StDtype::F16 && st.dtype != StDtype::BF16 &&
                 st.dtype != StDtype::F64) {
        fail("{}: tensor '{}' has dtype {}, expected F32, F16, BF16, or F8_E4M3 / I8 (FP4) with a '.scale' tensor",
             st.file, st.name, st_dtype_name(st.dtype));
      }
    };
    if (s.whole) {
      if (!s.expert_scales.empty()) fail("{}: GGUF {} has per-expert scales but one whole weight", o.hf_dir, p.name);
      check(*s.whole, std::vector<uint64_t>(p.ne.rbegin(), p.ne.rend()), s.whole_scale);
    } else if (!s.experts.empty()) {
      if (p.ne.size() != 3) fail("GGUF {} is not an expert tensor, but per-expert tensors map to it", p.name);
      if (s.whole_scale) fail("{}: scale '{}' does not belong to per-expert tensors", o.hf_dir, s.whole_scale->name);
      for (uint32_t e = 0; e < shape.n_experts; ++e) {
        if (!s.experts[e]) fail("{}: expert {} of GGUF {} is missing (have '{}')", o.hf_dir, e, p.name, s.hf_names.front());
        check(*s.experts[e], {p.ne[1], p.ne[0]}, s.expert_scales.empty() ? nullptr : s.expert_scales[e]);
      }
    } else {
      if (s.whole_scale || !s.expert_scales.empty()) fail("{}: GGUF {}: stacked expert tensors cannot have block scales", o.hf_dir, p.name);
      const uint64_t rows = p.role == Role::ExpertGateUp ? 2 * p.ne[1] : p.ne[1];
      check(*s.stack, {p.ne[2], rows, p.ne[0]}, nullptr);
    }
    if (p.type == GgmlType::MXFP4) {
      // Lossless repack only: every expert must be FP4 in the checkpoint.
      for (const StTensor* st : s.experts)
        if (!is_fp4(*st))
          fail("--type mxfp4-moe repacks the official FP4 experts bit for bit, but '{}' is {} (use q8_0 or flash-q4 for "
               "this checkpoint)",
               st->name, st_dtype_name(st->dtype));
      if (s.experts.empty())
        fail("--type mxfp4-moe repacks the official FP4 experts bit for bit, but GGUF {} comes from '{}' ({})", p.name,
             s.hf_names.front(), st_dtype_name((s.whole ? s.whole : s.stack)->dtype));
    }
  }
  for (const auto& [g, s] : sources)
    if (!planned.count(g))
      fail("{}: tensor '{}' (GGUF {}) does not belong in this model: config.json lays out no such tensor "
           "(check compress ratios, hash layers)",
           o.hf_dir, s.hf_names.front(), g);

  for (const auto& p : plan)
    if (!p.note.empty()) rep.notes.push_back(p.name + ": " + p.note);

  tokenizer::Vocab vocab;
  const fs::path tok = dir / "tokenizer.json";
  if (fs::exists(tok)) {
    vocab = vocab_from_tokenizer_json(tok.string(), shape.vocab);
    rep.vocab_from_tokenizer_json = true;
  } else {
    vocab = byte_vocab(shape.vocab);
    rep.notes.push_back("no tokenizer.json: wrote a byte-level placeholder vocabulary");
  }

  gguf::Writer w(o.out_path);
  add_model_metadata(w, shape);
  add_vocab_metadata(w, std::move(vocab), shape);
  for (const auto& p : plan) w.add_tensor(p.name, p.type, p.ne);
  w.write_header();

  constexpr uint64_t kChunkValues = uint64_t{1} << 22;  // rows per step: ~16 MB of floats
  std::vector<float> buf;
  for (size_t i = 0; i < plan.size(); ++i) {
    const auto& p = plan[i];
    const Source& s = sources.at(p.name);
    if (p.role == Role::Tid2eid) {
      std::vector<int64_t> ids = to_i64(*s.whole);
      std::vector<int32_t> out(ids.size());
      for (size_t k = 0; k < ids.size(); ++k) {
        if (ids[k] < 0 || ids[k] >= static_cast<int64_t>(shape.n_experts))
          fail("{}: tensor '{}' element {} (token {}) = {} is not an expert id in [0, {})", s.whole->file,
               s.whole->name, k, k / shape.n_experts_used, ids[k], shape.n_experts);
        out[k] = static_cast<int32_t>(ids[k]);
      }
      w.write_tensor_data({reinterpret_cast<const uint8_t*>(out.data()), out.size() * 4});
      rep.data_bytes += out.size() * 4;
      continue;
    }
    const uint64_t ne0 = p.ne[0];
    const uint64_t slabs = p.ne.size() == 3 ? p.ne[2] : 1;
    uint64_t rows = 1;
    for (size_t d = 1; d < std::min<size_t>(p.ne.size(), 2); ++d) rows *= p.ne[d];
    const uint64_t step = std::max<uint64_t>(1, kChunkValues / ne0);
    for (uint64_t slab = 0; slab < slabs; ++slab) {
      if (p.type == GgmlType::MXFP4) {  // bit-for-bit repack of one expert's FP4 matrix, in row chunks
        const StTensor& wt = *s.experts[slab];
        std::vector<uint8_t> bytes;
        for (uint64_t r0 = 0; r0 < rows; r0 += step) {
          const uint64_t nr = std::min(step, rows - r0);
          bytes.resize(row_bytes(traits(GgmlType::MXFP4), ne0) * nr);
          repack_fp4_rows_mxfp4(wt, *s.expert_scales[slab], ne0, r0, nr, bytes.data());
          w.write_tensor_data(bytes);
          rep.data_bytes += bytes.size();
        }
        continue;
      }
      for (uint64_t r0 = 0; r0 < rows; r0 += step) {
        const uint64_t nr = std::min(step, rows - r0);
        buf.resize(nr * ne0);
        read_rows(p, s, slab, r0, nr, buf.data());
        const std::string what =
            fmt::format("{} (from {})", p.name, s.experts.empty() ? s.hf_names.front() : s.experts[slab]->name);
        auto bytes = encode_rows(p.type, buf.data(), static_cast<int64_t>(nr), static_cast<int64_t>(ne0), what.c_str(),
                                 o.threads);
        w.write_tensor_data(bytes);
        rep.data_bytes += bytes.size();
      }
    }
    log(fmt::format("[{}/{}] {} {} {}", i + 1, plan.size(), p.name, traits(p.type).name, shape_str(p.ne)));
  }
  w.finish();
  rep.n_tensors = plan.size();
  return rep;
}

}  // namespace ds4::convert
