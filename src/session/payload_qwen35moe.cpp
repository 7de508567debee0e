// Session payload of a qwen35moe engine (docs/FORMATS.md "Session payload", qwen35moe). Same
// envelope as DeepSeek V4's (magic, version 1, XXH64 trailer); the reserved word holds the
// family (1), then, little-endian:
//   u64      model hash (EngineInfo::model_id)
//   u32 x 6  n_layer, n_vocab, kv_row (= n_head_kv * head_dim), conv_kernel, conv_channels,
//            ssm_floats (= value heads * dv * dk)
//   u64      n_pos, n_ctx (informational), sampler seed, sampler draws
//   i32      tokens[n_pos];  f32 logits[n_pos > 0 ? n_vocab : 0]
//   per layer: u32 kind (1 = Gated DeltaNet, 0 = full attention), then
//     DeltaNet:  f32 conv[(conv_kernel-1) * conv_channels], f32 ssm[ssm_floats]
//     attention: f32 k[n_pos * kv_row], f32 v[n_pos * kv_row]
//   u64      XXH64 (seed 0) of every byte before it
#include <xxhash.h>

#include "session/payload_io.h"

namespace ds4::session {

namespace {
constexpr uint32_t kFamilyQwen35Moe = 1;
}

std::vector<uint8_t> save_qwen35moe_payload(const Session::Impl& s) {
  const auto& hp = s.e->qwen->hparams();
  const auto& st = s.qstate;
  const int64_t kv_row = hp.n_head_kv * hp.head_dim;
  Out o;
  o.b.insert(o.b.end(), kMagic, kMagic + 8);
  o.put<uint32_t>(kVersion);
  o.put<uint32_t>(kFamilyQwen35Moe);
  o.put<uint64_t>(s.e->model_hash);
  for (int64_t v : {hp.n_layer, hp.n_vocab, kv_row, hp.conv_kernel, hp.conv_channels(), hp.ssm_n_v * hp.ssm_dv * hp.ssm_dk})
    o.put<uint32_t>(static_cast<uint32_t>(v));
  o.put<uint64_t>(static_cast<uint64_t>(st.n_pos));
  o.put<uint64_t>(static_cast<uint64_t>(s.n_ctx));
  const RngState rng = s.sampler.rng().state();
  o.put<uint64_t>(rng.seed);
  o.put<uint64_t>(rng.draws);
  o.put_vec(st.tokens);
  if (st.n_pos > 0) o.put_vec(st.logits);
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    const auto& L = st.layers[static_cast<size_t>(il)];
    const bool rec = hp.is_recurrent(il);
    o.put<uint32_t>(rec ? 1 : 0);
    if (rec) {
      o.put_vec(L.conv.to_host());
      o.put_vec(L.ssm.to_host());
    } else {
      o.put_vec(L.k.to_host(static_cast<size_t>(st.n_pos * kv_row)));
      o.put_vec(L.v.to_host(static_cast<size_t>(st.n_pos * kv_row)));
    }
  }
  o.put<uint64_t>(XXH64(o.b.data(), o.b.size(), 0));
  return std::move(o.b);
}

void load_qwen35moe_payload(Session::Impl& s, std::span<const uint8_t> bytes) {
  const auto& hp = s.e->qwen->hparams();
  if (bytes.size() < 8 || std::memcmp(bytes.data(), kMagic, 8) != 0)
    fail("session payload: not a ds4 session payload (bad magic)");
  if (bytes.size() < 8 + 4 + 4 + 8 + 8) fail("session payload: truncated ({} bytes)", bytes.size());
  In in(bytes);
  in.get<uint64_t>("magic");
  const uint32_t version = in.get<uint32_t>("version");
  if (version != kVersion) fail("session payload: version {} (this build reads version {})", version, kVersion);
  const size_t body = bytes.size() - 8;
  uint64_t stored;
  std::memcpy(&stored, bytes.data() + body, 8);
  if (XXH64(bytes.data(), body, 0) != stored)
    fail("session payload: checksum mismatch ({} bytes): the payload is truncated or corrupt", bytes.size());
  const uint32_t family = in.get<uint32_t>("family");
  if (family != kFamilyQwen35Moe)
    fail("session payload: saved by a model family {} engine, this engine runs qwen35moe", family);
  const uint64_t hash = in.get<uint64_t>("model hash");
  if (hash != s.e->model_hash)
    fail("session payload: saved with model {:016x}, this engine runs model {:016x} ({})", hash, s.e->model_hash,
         s.e->options.model_path);
  const int64_t kv_row = hp.n_head_kv * hp.head_dim;
  const char* names[] = {"n_layer", "n_vocab", "kv_row", "conv_kernel", "conv_channels", "ssm_floats"};
  const int64_t want[] = {hp.n_layer, hp.n_vocab, kv_row, hp.conv_kernel, hp.conv_channels(),
                          hp.ssm_n_v * hp.ssm_dv * hp.ssm_dk};
  for (int i = 0; i < 6; ++i) {
    const uint32_t v = in.get<uint32_t>(names[i]);
    if (v != static_cast<uint64_t>(want[i])) fail("session payload: {} is {}, the model has {}", names[i], v, want[i]);
  }
  const uint64_t n_pos = in.get<uint64_t>("n_pos");
  in.get<uint64_t>("n_ctx");
  if (n_pos > static_cast<uint64_t>(s.n_ctx)) throw ContextOverflow(s.n_ctx, static_cast<int64_t>(n_pos));
  RngState rng;
  rng.seed = in.get<uint64_t>("rng seed");
  rng.draws = in.get<uint64_t>("rng draws");

  model::qwen35moe::State st = s.e->qwen->new_state(*s.backend, s.n_ctx);
  st.n_pos = static_cast<int64_t>(n_pos);
  in.get_vec(st.tokens, n_pos, "tokens");
  for (size_t i = 0; i < st.tokens.size(); ++i)
    if (st.tokens[i] < 0 || st.tokens[i] >= hp.n_vocab)
      fail("session payload: token {} at index {} is outside the vocabulary", st.tokens[i], i);
  if (n_pos > 0) in.get_vec(st.logits, static_cast<uint64_t>(hp.n_vocab), "logits");
  std::vector<float> v;
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    auto& L = st.layers[static_cast<size_t>(il)];
    const uint32_t kind = in.get<uint32_t>("layer kind");
    if (kind != (hp.is_recurrent(il) ? 1u : 0u))
      fail("session payload: layer {} is {} in the payload, {} in the model", il, kind ? "DeltaNet" : "attention",
           hp.is_recurrent(il) ? "DeltaNet" : "attention");
    if (kind == 1) {
      in.get_vec(v, L.conv.size(), "convolution history");
      L.conv.from_host(v);
      in.get_vec(v, L.ssm.size(), "recurrent state");
      L.ssm.from_host(v);
    } else {
      in.get_vec(v, n_pos * static_cast<uint64_t>(kv_row), "K cache");
      L.k.from_host(v);
      in.get_vec(v, n_pos * static_cast<uint64_t>(kv_row), "V cache");
      L.v.from_host(v);
    }
  }
  if (in.at() != body)
    fail("session payload: {} unexpected bytes before the checksum", static_cast<int64_t>(body) - static_cast<int64_t>(in.at()));
  s.qstate = std::move(st);
  s.sampler.rng().set_state(rng);
  s.checkpoints.clear();
  s.add_checkpoint();
}

}  // namespace ds4::session
