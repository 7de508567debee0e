// Attention sublayer of DeepSeek V4 (spec §6.4-§6.7): Q/KV paths, the raw sliding window,
// compressors with their cross-token state, the CSA indexer, sink attention and the grouped
// low-rank output. Projections are batched over the tokens; what reads or writes session state
// runs as the backend's chunk ops, whose meaning is the token-by-token loop in position order,
// so a batch equals serial decoding.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "model/deepseek4/forward.h"

namespace ds4::model::deepseek4 {

void Forward::compressor_chunk(const CompressorWeights& cw, CompressorState& cs, const float* kvp, const float* scp,
                               bool is_indexer) {
  const int64_t R = cs.ratio, D = cs.dim;
  compute::CompressorEmit e;
  e.kv = cs.kv.data(), e.score = cs.score.data(), e.ratio = R, e.lanes = cs.lanes, e.dim = D;
  e.rows = cs.rows.data(), e.norm = cw.norm, e.eps = hp_.rms_eps, e.freqs = m_.freqs_compressed_;
  e.round = m_.opt_.act_quant_sim;
  e.round_kind = is_indexer ? compute::ActRound::HadamardFp4 : compute::ActRound::Fp8;
  e.n_round = is_indexer ? D : D - hp_.n_rot;
  // Every window [p+1-R, p] completed in the batch pools into the next row. Recorded decode
  // steps are keyed by which layers emit (step_key), so a replay emits at the same phase.
  for (int64_t t = 0; t < n_; ++t) claim_row(cs, p0_ + t);
  be_.compressor_chunk(cw.ape, e, p0_, n_, kvp, scp);
}

bool Forward::claim_row(CompressorState& cs, int64_t pos) {
  if ((pos + 1) % cs.ratio != 0) return false;
  if (cs.n_rows >= cs.capacity)
    fail("deepseek4: internal: compressed-row capacity {} exhausted at position {}", cs.capacity, pos);
  ++cs.n_rows;
  return true;
}

compute::Buffer<int32_t> Forward::indexer_chunk(int64_t il, const float* q_idx, const float* w_idx) {
  const LayerState& S = st_.layers[static_cast<size_t>(il)];
  const int64_t nh = hp_.indexer_n_head, D = hp_.indexer_head_dim, k = hp_.indexer_top_k;
  // attention_chunk consults a query's choice under the attention compressor's row count.
  if (S.index.ratio != hp_.ratio(il))
    fail("deepseek4: layer {}: indexer ratio {} differs from the compressor's {}", il, S.index.ratio, hp_.ratio(il));
  if (S.index.n_rows != (p0_ + n_) / S.index.ratio)
    fail("deepseek4: internal: layer {} holds {} indexer rows at position {}, expected {}", il, S.index.n_rows,
         p0_ + n_ - 1, (p0_ + n_) / S.index.ratio);
  compute::Backend::IndexerChunk c;
  c.q = q_idx, c.w = w_idx, c.n_heads = nh, c.head_dim = D;
  c.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D * nh)));
  c.keys = S.index.rows.data(), c.ratio = S.index.ratio, c.capacity = S.index.capacity;
  c.freqs = m_.freqs_compressed_, c.round = m_.opt_.act_quant_sim, c.k = k;
  compute::Buffer<int32_t> idx(be_, static_cast<size_t>(n_ * k));
  c.idx = idx.data();
  be_.indexer_chunk(c, p0_, n_);
  return idx;
}

void Forward::attention_layer(int64_t il, const FBuf& X, FBuf& Xout) {
  const LayerWeights& L = w_.layers[static_cast<size_t>(il)];
  LayerState& S = st_.layers[static_cast<size_t>(il)];
  const int64_t hd = hp_.head_dim, nh = hp_.n_head, R = hp_.ratio(il);
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
  // The indexer's path (its q, its compressor's stores and rows, the top-k of every query) is a
  // branch (backend.h): it reads only what is computed above and writes only its own state
  // and `sel`, so a device backend runs it beside q_b, the q/kv preparation and the attention
  // compressor, and joins it before the attention reads `sel`.
  compute::Buffer<int32_t> sel;
  if (L.has_indexer) {
    be_.branch_begin();
    if (need_index_scores) {
      iq = buf(n_ * L.idx_q_b.n_out);
      be_.matmul(L.idx_q_b, qr.data(), n_, iq.data());
    }
    compressor_chunk(L.idx_comp, S.index, ikv.data(), isc.data(), true);
    if (L.has_compressor && (p0_ + n_) / R > hp_.indexer_top_k) {
      if (!need_index_scores) fail("deepseek4: internal: indexer scores not computed for layer {}", il);
      sel = indexer_chunk(il, iq.data(), iw.data());
    }
    be_.branch_end();
  }
  FBuf q = buf(n_ * L.q_b.n_out);
  be_.matmul(L.q_b, qr.data(), n_, q.data());
  // Position-wise steps for the whole batch (each row depends on its own token only): q normed
  // per head without a weight (trap 6), kv with kv_norm, RoPE on both, kv's non-RoPE dims to FP8.
  be_.attn_qkv_prep(q.data(), kv.data(), n_, nh, hd, L.kv_norm, hp_.rms_eps, freqs, p0_, sim ? hd - hp_.n_rot : 0);

  // The position-ordered steps of the batch, one chunk op each (the ops' default bodies are
  // the token-by-token loop, so a batch still equals serial decoding): each compressor's
  // stores and window-end rows, the indexer's top-k for every query that needs one (above),
  // then attention over the raw window (the batch's own rows included), the visible compressed
  // rows or the chosen ones.
  if (L.has_compressor) compressor_chunk(L.comp, S.attn, ckv.data(), csc.data(), false);
  be_.join();
  compute::Backend::AttnChunk kvs;
  kvs.ring = S.raw.data();
  kvs.window = win;
  kvs.fresh = kv.data();
  if (L.has_compressor) {
    if (S.attn.n_rows != (p0_ + n_) / R)
      fail("deepseek4: internal: layer {} holds {} compressed rows at position {}", il, S.attn.n_rows, p0_ + n_ - 1);
    kvs.comp = S.attn.rows.data();
    kvs.ratio = R;
    kvs.comp_capacity = S.attn.capacity;
    if (sel.data()) {
      kvs.idx = sel.data();
      kvs.n_idx = hp_.indexer_top_k;
    }
  }
  FBuf heads = buf(n_ * nh * hd);
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));
  be_.attention_chunk(q.data(), nh, hd, kvs, p0_, n_, L.sinks, scale, heads.data());
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
