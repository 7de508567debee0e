#include "session/checkpoint.h"

#include "core/error.h"

namespace ds4::session {

using model::deepseek4::CompressorState;
using model::deepseek4::State;

namespace {

CompressorMark mark(const CompressorState& cs) { return {cs.kv.to_host(), cs.score.to_host(), cs.n_rows}; }

void unmark(CompressorState& cs, const CompressorMark& m, size_t il, const char* which) {
  if (cs.kv.size() != m.kv.size() || cs.score.size() != m.score.size() || cs.n_rows < m.n_rows)
    fail("session checkpoint: layer {} {} compressor does not match the state ({} rows, checkpoint {})", il, which,
         cs.n_rows, m.n_rows);
  cs.kv.from_host(m.kv);
  cs.score.from_host(m.score);
  cs.n_rows = m.n_rows;  // rows past the mark are dead; appends overwrite them
}

}  // namespace

uint64_t Checkpoint::bytes() const {
  uint64_t n = logits.size();
  for (const auto& r : raw) n += r.size();
  for (const auto* v : {&conv, &ssm})
    for (const auto& x : *v) n += x.size();
  for (const auto* v : {&attn, &index})
    for (const auto& m : *v) n += m.kv.size() + m.score.size();
  return n * sizeof(float);
}

Checkpoint take_checkpoint(const State& st) {
  Checkpoint cp;
  cp.n_pos = st.n_pos;
  cp.logits = st.logits;
  for (const auto& L : st.layers) {
    cp.raw.push_back(L.raw.to_host());
    cp.attn.push_back(mark(L.attn));
    cp.index.push_back(mark(L.index));
  }
  return cp;
}

void restore_checkpoint(State& st, const Checkpoint& cp) {
  if (st.layers.size() != cp.raw.size() || st.n_pos < cp.n_pos ||
      st.tokens.size() != static_cast<size_t>(st.n_pos))
    fail("session checkpoint at position {} does not fit a state at position {} with {} layers", cp.n_pos, st.n_pos,
         st.layers.size());
  for (size_t il = 0; il < st.layers.size(); ++il) {
    auto& L = st.layers[il];
    if (L.raw.size() != cp.raw[il].size()) fail("session checkpoint: layer {} window size differs", il);
    L.raw.from_host(cp.raw[il]);
    unmark(L.attn, cp.attn[il], il, "attention");
    unmark(L.index, cp.index[il], il, "indexer");
  }
  st.n_pos = cp.n_pos;
  st.tokens.resize(static_cast<size_t>(cp.n_pos));
  st.logits = cp.logits;
}

uint64_t checkpoint_bytes(const model::deepseek4::HParams& hp) {
  uint64_t floats = static_cast<uint64_t>(hp.n_vocab);
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    floats += static_cast<uint64_t>(hp.sliding_window * hp.head_dim);
    const int64_t R = hp.ratio(il);
    const int64_t lanes = R == 4 ? 2 : 1;
    if (R > 0) floats += 2 * static_cast<uint64_t>(lanes * R * lanes * hp.head_dim);
    if (R == 4) floats += 2 * static_cast<uint64_t>(2 * R * 2 * hp.indexer_head_dim);
  }
  return floats * sizeof(float);
}

Checkpoint take_checkpoint(const model::qwen35moe::State& st) {
  Checkpoint cp;
  cp.n_pos = st.n_pos;
  cp.logits = st.logits;
  for (const auto& L : st.layers) {
    cp.conv.push_back(L.conv.size() ? L.conv.to_host() : std::vector<float>{});
    cp.ssm.push_back(L.ssm.size() ? L.ssm.to_host() : std::vector<float>{});
  }
  return cp;
}

void restore_checkpoint(model::qwen35moe::State& st, const Checkpoint& cp) {
  if (st.layers.size() != cp.conv.size() || st.n_pos < cp.n_pos || st.tokens.size() != static_cast<size_t>(st.n_pos))
    fail("session checkpoint at position {} does not fit a qwen35moe state at position {} with {} layers", cp.n_pos,
         st.n_pos, st.layers.size());
  for (size_t il = 0; il < st.layers.size(); ++il) {
    auto& L = st.layers[il];
    if (L.conv.size() != cp.conv[il].size() || L.ssm.size() != cp.ssm[il].size())
      fail("session checkpoint: layer {} recurrent state size differs", il);
    if (L.conv.size()) L.conv.from_host(cp.conv[il]);
    if (L.ssm.size()) L.ssm.from_host(cp.ssm[il]);
  }
  st.n_pos = cp.n_pos;
  st.tokens.resize(static_cast<size_t>(cp.n_pos));
  st.logits = cp.logits;
}

uint64_t checkpoint_bytes(const model::qwen35moe::HParams& hp) {
  return (static_cast<uint64_t>(hp.n_vocab) + model::qwen35moe::State::recurrent_floats(hp)) * sizeof(float);
}

}  // namespace ds4::session
