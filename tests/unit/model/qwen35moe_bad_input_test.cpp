// qwen35moe loader on bad files: a converted file is rewritten with one thing wrong (a tensor
// missing, a shape changed, a metadata key missing or inconsistent) and loading must fail with
// a ds4::Error naming it, before anything is computed.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <string>

#include <unistd.h>

#include "common/test_paths.h"
#include "convert/convert_hf.h"
#include "core/error.h"
#include "gguf/gguf.h"
#include "model/qwen35moe/model.h"
#include "qwen35moe_checkpoint.h"

namespace fs = std::filesystem;

namespace {

const std::string& good_file() {
  static const std::string path = [] {
    const fs::path d = ds4::test::test_tmp_dir() / ("ds4_qwen_bad_" + std::to_string(::getpid()));
    ds4::test::write_qwen_checkpoint((d / "hf").string(), ds4::test::QwenTiny{}, 5);
    ds4::convert::ConvertOptions o;
    o.hf_dir = (d / "hf").string();
    o.out_path = (d / "good.gguf").string();
    o.recipe = ds4::convert::Recipe::F32;
    ds4::convert::convert_hf(o);
    return o.out_path;
  }();
  return path;
}

// Copies good_file() with edit(key) deciding each metadata value (nullopt drops it) and
// tensor(name, ne) each tensor (false drops it; ne may be changed: data is zero-filled then).
std::string rewrite(const std::string& tag,
                    const std::function<std::optional<ds4::gguf::Value>(const std::string&, const ds4::gguf::Value&)>& kv,
                    const std::function<bool(const std::string&, std::vector<uint64_t>&)>& tensor) {
  const auto in = ds4::gguf::File::open(good_file());
  const std::string out = good_file() + "." + tag + ".gguf";
  ds4::gguf::Writer w(out);
  for (const auto& e : in.metadata())
    if (auto v = kv(e.key, e.value)) w.add_kv(e.key, *v);
  struct T {
    const ds4::gguf::TensorInfo* t;
    std::vector<uint64_t> ne;
  };
  std::vector<T> keep;
  for (const auto& t : in.tensors()) {
    std::vector<uint64_t> ne = t.ne;
    if (!tensor(t.name, ne)) continue;
    w.add_tensor(t.name, t.type, ne);
    keep.push_back({&t, ne});
  }
  w.write_header();
  for (const auto& k : keep) {
    if (k.ne == k.t->ne) {
      w.write_tensor_data({k.t->data, k.t->n_bytes});
    } else {
      uint64_t n = 4;
      for (uint64_t d : k.ne) n *= d;
      w.write_tensor_data(std::vector<uint8_t>(n, 0));
    }
  }
  w.finish();
  return out;
}

void expect_load_error(const std::string& path, const std::string& needle) {
  try {
    ds4::model::qwen35moe::Model::load(path);
    ADD_FAILURE() << "loaded; expected an error mentioning \"" << needle << "\"";
  } catch (const ds4::Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

auto same_kv = [](const std::string&, const ds4::gguf::Value& v) { return std::optional<ds4::gguf::Value>(v); };
auto all_tensors = [](const std::string&, std::vector<uint64_t>&) { return true; };

}  // namespace

TEST(Qwen35MoeBadInput, GoodFileLoads) { EXPECT_NO_THROW(ds4::model::qwen35moe::Model::load(rewrite("same", same_kv, all_tensors))); }

TEST(Qwen35MoeBadInput, MissingTensorIsNamed) {
  expect_load_error(rewrite("no_conv", same_kv, [](const std::string& n, auto&) { return n != "blk.1.ssm_conv1d.weight"; }),
                    "blk.1.ssm_conv1d.weight");
  expect_load_error(rewrite("no_q", same_kv, [](const std::string& n, auto&) { return n != "blk.3.attn_q.weight"; }),
                    "blk.3.attn_q.weight");
}

TEST(Qwen35MoeBadInput, WrongShapeIsNamed) {
  const std::string p = rewrite("shape", same_kv, [](const std::string& n, std::vector<uint64_t>& ne) {
    if (n == "blk.0.ssm_out.weight") ne[1] += 1;
    return true;
  });
  expect_load_error(p, "blk.0.ssm_out.weight");
}

TEST(Qwen35MoeBadInput, MissingOrInconsistentMetadataIsNamed) {
  expect_load_error(rewrite("no_state", [](const std::string& k, const ds4::gguf::Value& v) {
                      return k == "qwen35moe.ssm.state_size" ? std::nullopt : std::optional(v);
                    }, all_tensors),
                    "qwen35moe.ssm.state_size");
  expect_load_error(rewrite("heads", [](const std::string& k, const ds4::gguf::Value& v) {
                      return k == "qwen35moe.ssm.group_count" ? std::optional(ds4::gguf::Value::u32(3)) : std::optional(v);
                    }, all_tensors),
                    "tile");
  expect_load_error(rewrite("arch", [](const std::string& k, const ds4::gguf::Value& v) {
                      return k == "general.architecture" ? std::optional(ds4::gguf::Value::string("qwen3next")) : std::optional(v);
                    }, all_tensors),
                    "general.architecture");
}
