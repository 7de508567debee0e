// Attention sublayer of DeepSeek V4 (spec §6.4-§6.7): Q/KV paths, the raw sliding window,
// compressors with their cross-token state, the CSA indexer, sink attention and the grouped
// low-rank output. Projections are batched over the tokens; everything that reads or writes
// session state runs token by token in position order, so a batch equals serial decoding.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "model/deepseek4/forward.h"

namespace ds4::model::deepseek4 {

void Forward::compressor_step(const CompressorWeights& cw, CompressorState& cs, const float* kvp, const float* scp,
                              int64_t pos, bool is_indexer) {
  const int64_t R = cs.ratio, D = cs.dim;
  be_.compressor_store(cw.ape, pos, R, cs.lanes, kvp, scp, cs.width(), cs.kv.data(), cs.score.data());
  // The window [pos+1-R, pos] is complete: pool it into the next row. Recorded decode steps
  // are keyed by which layers emit (step_key), so a replay emits at the same phase.
  if (!claim_row(cs, pos)) return;
  compute::CompressorEmit e;
  e.kv = cs.kv.data(), e.score = cs.score.data(), e.ratio = R, e.lanes = cs.lanes, e.dim = D;
  e.rows = cs.rows.data(), e.norm = cw.norm, e.eps = hp_.rms_eps, e.freqs = m_.freqs_compressed_;
  e.round = m_.opt_.act_quant_sim;
  e.round_kind = is_indexer ? compute::ActRound::HadamardFp4 : compute::ActRound::Fp8;
  e.n_round = is_indexer ? D : D - hp_.n_rot;
  be_.compressor_emit(e, pos);
}

bool Forward::claim_row(CompressorState& cs, int64_t pos) {
  if ((pos + 1) % cs.ratio != 0) return false;
  if (cs.n_rows >= cs.capacity)
    fail("deepseek4: internal: compressed-row capacity {} exhausted at position {}", cs.capacity, pos);
  ++cs.n_rows;
  return true;
}

compute::Buffer<int32_t> Forward::indexer_select(int64_t il, const float* q_idx, const float* w_idx, int64_t pos,
                                                 int64_t k) {
  const LayerState& S = st_.layers[static_cast<size_t>(il)];
  const int64_t nh = hp_.indexer_n_head, D = hp_.indexer_head_dim;
  FBuf q = buf(nh * D);
  be_.copy(q.data(), q_idx, static_cast<size_t>(nh * D) * sizeof(float));
  be_.rope_tail(q.data(), 1, nh, D, m_.freqs_compressed_, pos, 0, false);
  if (m_.opt_.act_quant_sim) be_.act_round(q.data(), nh, D, D, compute::ActRound::HadamardFp4);
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D * nh)));
  // Sized for the capacity, not today's count: a recorded step keeps its buffers.
  const compute::RowCount n_rows = compute::RowCount::at(pos, S.index.ratio, S.index.capacity);
  if (n_rows.n != S.index.n_rows)
    fail("deepseek4: internal: layer {} holds {} indexer rows at position {}, expected {}", il, S.index.n_rows, pos,
         n_rows.n);
  FBuf score = buf(S.index.capacity);
  be_.indexer_scores(q.data(), w_idx, scale, nh, D, S.index.rows.data(), n_rows, score.data());
  compute::Buffer<int32_t> idx(be_, static_cast<size_t>(k));
  be_.top_k(score.data(), n_rows, k, idx.data());
  return idx;
}

void Forward::attention_layer(int64_t il, const FBuf& X, FBuf& Xout) {
  const LayerWeights& L = w_.layers[static_cast<size_t>(il)];
  LayerState& S = st_.layers[static_cast<size_t>(il)];
  const int64_t d = hp_.n_embd, hd = hp_.head_dim, nh = hp_.n_head, R = hp_.ratio(il);
  const int64_t win = hp_.sliding_window;
  const std::vector<double>& freqs = R > 0 ? m_.freqs_compressed_ : m_.freqs_swa_;
  const bool sim = m_.opt_.act_quant_sim;

  HcMix mix = hc_pre(L.hc_attn_fn, L.hc_attn_base, L.hc_attn_scale, X, L.attn_norm);
  const FBuf& a = mix.x_in;  // normalized by attn_norm

  // Every projection of `a` in one call (a device backend quantizes `a` once and runs them in
  // one launch); then those of the normalized q_a output.
  FBuf qr = buf(n_ * L.q_a.n_out), kv = buf(n_ * L.kv.n_out);
  FBuf ckv, csc, ikv, isc, iq, iw;
  std::vector<const compute::Matrix*> ws{&L.q_a, &L.kv};
  std::vector<float*> ys{qr.data(), kv.data()};
  auto also = [&](const compute::Matrix& w, FBuf& y) {
    y = buf(n_ * w.n_out);
    ws.push_back(&w);
    ys.push_back(y.data());
  };
  if (L.has_compressor) {
    also(L.comp.kv, ckv);
    also(L.comp.gate, csc);
  }
  bool need_index_scores = false;
  if (L.has_indexer) {
    also(L.idx_comp.kv, ikv);
    also(L.idx_comp.gate, isc);
    // Scoring only matters once some query of the batch sees more rows than top-k.
    need_index_scores = (p0_ + n_) / R > hp_.indexer_top_k;
    if (need_index_scores) also(L.idx_proj, iw);
  }
  be_.matmul_many(ws, a.data(), n_, ys);

  be_.rms_norm(qr.data(), L.q_a_norm, hp_.q_lora_rank, n_, hp_.rms_eps, qr.data());
  FBuf q = buf(n_ * L.q_b.n_out);
  if (need_index_scores) {
    iq = buf(n_ * L.idx_q_b.n_out);
    const compute::Matrix* qw[] = {&L.q_b, &L.idx_q_b};
    float* qy[] = {q.data(), iq.data()};
    be_.matmul_many(qw, qr.data(), n_, qy);
  } else {
    be_.matmul(L.q_b, qr.data(), n_, q.data());
  }
  be_.rms_norm(q.data(), nullptr, hd, n_ * nh, hp_.rms_eps, q.data());  // per head, no weight (trap 6)
  be_.rms_norm(kv.data(), L.kv_norm, hd, n_, hp_.rms_eps, kv.data());

  // Position-wise steps for the whole batch (each row depends on its own token only).
  be_.rope_tail(q.data(), n_, nh, hd, freqs, p0_, 1, false);
  be_.rope_tail(kv.data(), n_, 1, hd, freqs, p0_, 1, false);
  if (sim) be_.act_round(kv.data(), n_, hd, hd - hp_.n_rot, compute::ActRound::Fp8);

  FBuf heads = buf(n_ * nh * hd);
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));
  for (int64_t t = 0; t < n_; ++t) {
    const int64_t p = p0_ + t;
    be_.store_row(S.raw.data(), win, hd, p, kv.data() + t * hd);
    if (L.has_compressor)
      compressor_step(L.comp, S.attn, ckv.data() + t * S.attn.width(), csc.data() + t * S.attn.width(), p, false);
    if (L.has_indexer)
      compressor_step(L.idx_comp, S.index, ikv.data() + t * S.index.width(), isc.data() + t * S.index.width(), p, true);

    // Keys/values: the raw window (current token included) plus visible compressed rows.
    compute::AttnKv kvs{S.raw.data(), win, p};
    compute::Buffer<int32_t> sel;
    if (L.has_compressor) {
      kvs.comp = S.attn.rows.data();
      kvs.n_comp = S.attn.n_rows;  // == (p+1)/R: rows are emitted at window ends
      kvs.ratio = R;
      kvs.comp_capacity = S.attn.capacity;
      if (kvs.n_comp != (p + 1) / R)
        fail("deepseek4: internal: layer {} holds {} compressed rows at position {}", il, kvs.n_comp, p);
      if (L.has_indexer && kvs.n_comp > hp_.indexer_top_k) {
        if (!need_index_scores) fail("deepseek4: internal: indexer scores not computed for layer {}", il);
        sel = indexer_select(il, iq.data() + t * hp_.indexer_n_head * hp_.indexer_head_dim,
                             iw.data() + t * hp_.indexer_n_head, p, hp_.indexer_top_k);
        kvs.idx = sel.data();
        kvs.n_idx = hp_.indexer_top_k;
      }
    }
    be_.attention(q.data() + t * nh * hd, nh, hd, kvs, L.sinks, scale, heads.data() + t * nh * hd);
  }
  be_.rope_tail(heads.data(), n_, nh, hd, freqs, p0_, 1, true);  // undo the query-position rotation (trap 5)

  // Grouped low-rank output: group g maps its heads' concatenation to o_lora_rank values.
  const int64_t G = hp_.o_groups, rank = hp_.o_lora_rank, group_in = nh / G * hd;
  FBuf low = buf(n_ * G * rank);
  if (L.out_a.n_out != G * rank || L.out_a.n_in != group_in)
    fail("deepseek4: layer {} output projection is {} x {}, expected {} x {}", il, L.out_a.n_out, L.out_a.n_in,
         G * rank, group_in);
  be_.matmul_grouped(L.out_a, G, heads.data(), n_, low.data(), nh * hd, G * rank);
  FBuf out = project(L.out_b, low, n_);
  hc_post(mix, out, X, Xout);
}

}  // namespace ds4::model::deepseek4
