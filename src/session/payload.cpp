// Session payload save/load. Format (docs/FORMATS.md "Session payload"), all little-endian:
//
//   char[8]  magic "DS4SESS\0"
//   u32      version (1)
//   u32      flags: bit 0 = the state was computed under steering (a steering record follows
//            the model hash); other bits 0
//   u64      model hash: XXH64 of the GGUF bytes before its tensor data (EngineInfo::model_id)
//   if flags bit 0: u64 steering file id (EngineInfo::steering_id), f32 attn scale, f32 ffn
//            scale (of the first evaluation), u32 mixed (1: the scales changed along the way)
//   u32 x 6  n_layer, n_vocab, head_dim, sliding_window, indexer_head_dim, act_quant_sim (0/1)
//   u64      n_pos: tokens in the state
//   u64      n_ctx of the saving session (informational)
//   u64 x 2  sampler RNG: seed, draws (SplitMix64 position, include/ds4/sampling.h)
//   i32      tokens[n_pos]
//   f32      logits[n_pos > 0 ? n_vocab : 0]   next-token logits
//   per layer, in order:
//     u32    compress ratio R (must match the model)
//     f32    raw[sliding_window * head_dim]   sliding-window ring, position p in slot p % window
//     if R > 0, the attention compressor, then if R == 4 the indexer compressor (dim D =
//     head_dim resp. indexer_head_dim, lanes L = 2 if R == 4 else 1):
//       u64  n_rows (must equal n_pos / R)
//       f32  kv[L*R * L*D], score[L*R * L*D]   partial windows (score -inf = empty slot)
//       f32  rows[n_rows * D]                 emitted compressed rows
//   u64      XXH64 (seed 0) of every byte before it
#include <xxhash.h>

#include <bit>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "session/payload_io.h"
#include "session/session_impl.h"

namespace ds4 {

static_assert(std::endian::native == std::endian::little, "session payloads are written in host order");

namespace {

using session::In;
using session::kMagic;
using session::kVersion;
using session::Out;

void put_compressor(Out& o, const model::deepseek4::CompressorState& cs) {
  o.put<uint64_t>(static_cast<uint64_t>(cs.n_rows));
  o.put_vec(cs.kv.to_host());
  o.put_vec(cs.score.to_host());
  o.put_vec(cs.rows.to_host(static_cast<size_t>(cs.n_rows * cs.dim)));
}

void get_compressor(In& in, model::deepseek4::CompressorState& cs, int64_t n_pos, size_t il, const char* which) {
  const uint64_t n_rows = in.get<uint64_t>("compressor row count");
  const uint64_t expect = static_cast<uint64_t>(n_pos / cs.ratio);
  if (n_rows != expect)
    fail("session payload: layer {} {} compressor has {} rows; {} tokens at ratio {} make {}", il, which, n_rows,
         n_pos, cs.ratio, expect);
  if (n_rows > static_cast<uint64_t>(cs.capacity))
    fail("session payload: layer {} {} compressor has {} rows; the session holds {}", il, which, n_rows, cs.capacity);
  const size_t n = cs.kv.size();
  std::vector<float> v;
  in.get_vec(v, n, "compressor window");
  cs.kv.from_host(v);
  in.get_vec(v, n, "compressor scores");
  cs.score.from_host(v);
  in.get_vec(v, n_rows * static_cast<uint64_t>(cs.dim), "compressed rows");
  cs.rows.from_host(v);
  cs.n_rows = static_cast<int64_t>(n_rows);
}

}  // namespace

std::vector<uint8_t> Session::save_payload() const {
  const Impl& s = *impl_;
  if (s.qwen()) return session::save_qwen35moe_payload(s);
  const auto& hp = s.e->model->hparams();
  const auto& st = s.state;
  Out o;
  o.b.insert(o.b.end(), kMagic, kMagic + 8);
  o.put<uint32_t>(kVersion);
  const bool steered = !(s.state_sig == SteerSig{});
  o.put<uint32_t>(steered ? 1 : 0);
  o.put<uint64_t>(s.e->model_hash);
  if (steered) {
    o.put<uint64_t>(s.state_sig.id);
    o.put<float>(s.state_sig.attn);
    o.put<float>(s.state_sig.ffn);
    o.put<uint32_t>(s.state_sig.mixed ? 1 : 0);
  }
  for (int64_t v : {hp.n_layer, hp.n_vocab, hp.head_dim, hp.sliding_window, hp.indexer_head_dim})
    o.put<uint32_t>(static_cast<uint32_t>(v));
  o.put<uint32_t>(s.e->options.act_quant_sim ? 1 : 0);
  o.put<uint64_t>(static_cast<uint64_t>(st.n_pos));
  o.put<uint64_t>(static_cast<uint64_t>(s.n_ctx));
  const RngState rng = s.sampler.rng().state();
  o.put<uint64_t>(rng.seed);
  o.put<uint64_t>(rng.draws);
  o.put_vec(st.tokens);
  if (st.n_pos > 0) o.put_vec(st.logits);
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    const auto& L = st.layers[static_cast<size_t>(il)];
    const int64_t R = hp.ratio(il);
    o.put<uint32_t>(static_cast<uint32_t>(R));
    o.put_vec(L.raw.to_host());
    if (R > 0) put_compressor(o, L.attn);
    if (R == 4) put_compressor(o, L.index);
  }
  o.put<uint64_t>(XXH64(o.b.data(), o.b.size(), 0));
  return std::move(o.b);
}

void Session::load_payload(std::span<const uint8_t> bytes) { load_payload_impl(bytes, false); }
void Session::load_payload_any_steering(std::span<const uint8_t> bytes) { load_payload_impl(bytes, true); }

void Session::load_payload_impl(std::span<const uint8_t> bytes, bool any_steering) {
  Impl& s = *impl_;
  if (s.qwen()) return session::load_qwen35moe_payload(s, bytes);
  const auto& hp = s.e->model->hparams();
  if (bytes.size() < 8 || std::memcmp(bytes.data(), kMagic, 8) != 0)
    fail("session payload: not a ds4 session payload (bad magic)");
  if (bytes.size() < 8 + 4 + 8)
    fail("session payload: truncated ({} bytes)", bytes.size());
  In in(bytes);
  in.get<uint64_t>("magic");
  const uint32_t version = in.get<uint32_t>("version");
  if (version != kVersion) fail("session payload: version {} (this build reads version {})", version, kVersion);
  // The checksum first: a corrupt payload must not be interpreted field by field.
  const size_t body = bytes.size() - 8;
  uint64_t stored;
  std::memcpy(&stored, bytes.data() + body, 8);
  if (XXH64(bytes.data(), body, 0) != stored)
    fail("session payload: checksum mismatch ({} bytes): the payload is truncated or corrupt", bytes.size());
  const uint32_t flags = in.get<uint32_t>("flags");
  if (flags & ~1u) fail("session payload: unknown flags {:#x} at byte 12", flags);
  const uint64_t hash = in.get<uint64_t>("model hash");
  if (hash != s.e->model_hash)
    fail("session payload: saved with model {:016x}, this engine runs model {:016x} ({})", hash, s.e->model_hash,
         s.e->options.model_path);
  SteerSig sig;
  if (flags & 1u) {
    sig.id = in.get<uint64_t>("steering id");
    sig.attn = in.get<float>("steering attn scale");
    sig.ffn = in.get<float>("steering ffn scale");
    const uint32_t mixed = in.get<uint32_t>("steering mixed flag");
    if (mixed > 1) fail("session payload: steering mixed flag {} is neither 0 nor 1", mixed);
    sig.mixed = mixed == 1;
  }
  const SteerSig want_sig = s.current_sig();
  auto describe = [](const SteerSig& g) {
    if (g.mixed) return std::string("steering scales that changed while the state grew");
    if (g == SteerSig{}) return std::string("no steering");
    return fmt::format("steering file {:016x} at attn {} / ffn {}", g.id, g.attn, g.ffn);
  };
  if (!any_steering && (sig.mixed || !(sig == want_sig)))
    fail("session payload: the state was computed under {}; this session runs {}", describe(sig), describe(want_sig));
  const char* names[] = {"n_layer", "n_vocab", "head_dim", "sliding_window", "indexer_head_dim"};
  const int64_t want[] = {hp.n_layer, hp.n_vocab, hp.head_dim, hp.sliding_window, hp.indexer_head_dim};
  for (int i = 0; i < 5; ++i) {
    const uint32_t v = in.get<uint32_t>(names[i]);
    if (v != static_cast<uint64_t>(want[i])) fail("session payload: {} is {}, the model has {}", names[i], v, want[i]);
  }
  const uint32_t sim = in.get<uint32_t>("act_quant_sim");
  if ((sim != 0) != s.e->options.act_quant_sim)
    fail("session payload: saved with act_quant_sim {}, this engine runs with it {}", sim ? "on" : "off",
         s.e->options.act_quant_sim ? "on" : "off");
  const uint64_t n_pos = in.get<uint64_t>("n_pos");
  in.get<uint64_t>("n_ctx");
  if (n_pos > static_cast<uint64_t>(s.n_ctx)) throw ContextOverflow(s.n_ctx, static_cast<int64_t>(n_pos));
  RngState rng;
  rng.seed = in.get<uint64_t>("rng seed");
  rng.draws = in.get<uint64_t>("rng draws");

  model::deepseek4::State st = s.new_state();
  st.n_pos = static_cast<int64_t>(n_pos);
  in.get_vec(st.tokens, n_pos, "tokens");
  for (size_t i = 0; i < st.tokens.size(); ++i)
    if (st.tokens[i] < 0 || st.tokens[i] >= hp.n_vocab)
      fail("session payload: token {} at index {} is outside the vocabulary", st.tokens[i], i);
  if (n_pos > 0) in.get_vec(st.logits, static_cast<uint64_t>(hp.n_vocab), "logits");
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    auto& L = st.layers[static_cast<size_t>(il)];
    const uint32_t R = in.get<uint32_t>("layer compress ratio");
    if (R != static_cast<uint64_t>(hp.ratio(il)))
      fail("session payload: layer {} has compress ratio {}, the model {}", il, R, hp.ratio(il));
    {
      std::vector<float> raw;
      in.get_vec(raw, L.raw.size(), "sliding window");
      L.raw.from_host(raw);
    }
    if (R > 0) get_compressor(in, L.attn, st.n_pos, static_cast<size_t>(il), "attention");
    if (R == 4) get_compressor(in, L.index, st.n_pos, static_cast<size_t>(il), "indexer");
  }
  if (in.at() != body)
    fail("session payload: {} unexpected bytes before the checksum", static_cast<int64_t>(body) - static_cast<int64_t>(in.at()));

  s.state = std::move(st);
  s.state_sig = sig;
  s.sampler.rng().set_state(rng);
  s.checkpoints.clear();
  s.add_checkpoint();  // later rewinds within the loaded text need not start from position 0
}

void Session::save(const std::string& path) const {
  const auto bytes = save_payload();
  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) fail("{}: cannot open for writing", tmp);
  const size_t w = std::fwrite(bytes.data(), 1, bytes.size(), f);
  const int c = std::fclose(f);
  if (w != bytes.size() || c != 0) {
    std::remove(tmp.c_str());
    fail("{}: write failed", tmp);
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) fail("{}: cannot rename to {}: {}", tmp, path, ec.message());
}

void Session::load(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) fail("{}: cannot open session payload", path);
  std::vector<uint8_t> bytes;
  uint8_t buf[1 << 16];
  size_t got;
  while ((got = std::fread(buf, 1, sizeof buf, f)) > 0) bytes.insert(bytes.end(), buf, buf + got);
  const bool err = std::ferror(f);
  std::fclose(f);
  if (err) fail("{}: read error", path);
  try {
    load_payload(bytes);
  } catch (const Error& e) {
    fail("{}: {}", path, e.what());
  }
}

}  // namespace ds4
