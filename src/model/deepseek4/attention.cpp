// Attention sublayer of DeepSeek V4 (spec §6.4-§6.7): Q/KV paths, the raw sliding window,
// compressors with their cross-token state, the CSA indexer, sink attention and the grouped
// low-rank output. Projections are batched over the tokens; everything that reads or writes
// session state runs token by token in position order, so a batch equals serial decoding.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "core/error.h"
#include "model/deepseek4/forward.h"

namespace ds4::model::deepseek4 {

namespace {

std::vector<float> project(compute::Backend& be, const compute::Matrix& w, const std::vector<float>& x, int64_t n) {
  std::vector<float> y(static_cast<size_t>(n * w.n_out));
  be.matmul(w, x.data(), n, y.data());
  return y;
}

}  // namespace

void Forward::compressor_step(const CompressorWeights& cw, CompressorState& cs, const float* kvp, const float* scp,
                              int64_t pos, bool is_indexer) {
  const int64_t R = cs.ratio, D = cs.dim, W = cs.width();
  const int64_t slot = (cs.lanes == 2 ? R : 0) + pos % R;
  float* kv_row = cs.kv.data() + slot * W;
  float* sc_row = cs.score.data() + slot * W;
  std::memcpy(kv_row, kvp, static_cast<size_t>(W) * sizeof(float));
  // The position bias joins the score before it is stored (trap 10).
  row_as_f32(cw.ape, pos % R, sc_row);
  for (int64_t j = 0; j < W; ++j) sc_row[j] += scp[j];
  if ((pos + 1) % R != 0) return;

  // Window [pos+1-R, pos] is complete: pool it into one row.
  const int64_t slots = cs.lanes * R;
  std::vector<const float*> vals(static_cast<size_t>(slots)), scores(static_cast<size_t>(slots));
  for (int64_t r = 0; r < slots; ++r) {
    // Ratio 4: rows 0..R-1 hold the previous window, read through lane A (first D columns);
    // rows R..2R-1 the current window through lane B (trap 9).
    const int64_t col = (cs.lanes == 2 && r >= R) ? D : 0;
    vals[r] = cs.kv.data() + r * W + col;
    scores[r] = cs.score.data() + r * W + col;
  }
  std::vector<float> y(static_cast<size_t>(D));
  be_.softmax_pool(vals.data(), scores.data(), slots, D, y.data());
  be_.rms_norm(y.data(), cw.norm, D, 1, hp_.rms_eps, y.data());
  be_.rope_tail(y.data(), 1, D, m_.freqs_compressed_, pos + 1 - R, false);  // window start (trap 8)
  if (m_.opt_.act_quant_sim) {
    if (is_indexer) be_.act_round(y.data(), 1, D, D, compute::ActRound::HadamardFp4);
    else be_.act_round(y.data(), 1, D, D - hp_.n_rot, compute::ActRound::Fp8);
  }
  cs.rows.insert(cs.rows.end(), y.begin(), y.end());
  if (cs.lanes == 2) {
    // The current window becomes the previous one for the next emission.
    std::memcpy(cs.kv.data(), cs.kv.data() + R * W, static_cast<size_t>(R * W) * sizeof(float));
    std::memcpy(cs.score.data(), cs.score.data() + R * W, static_cast<size_t>(R * W) * sizeof(float));
  }
}

std::vector<int64_t> Forward::indexer_select(int64_t il, const float* q_idx, const float* w_idx, int64_t pos) {
  const LayerState& S = st_.layers[static_cast<size_t>(il)];
  const int64_t nh = hp_.indexer_n_head, D = hp_.indexer_head_dim;
  const int64_t n_rows = S.index.n_rows();
  std::vector<float> q(q_idx, q_idx + nh * D);
  be_.rope_tail(q.data(), nh, D, m_.freqs_compressed_, pos, false);
  if (m_.opt_.act_quant_sim) be_.act_round(q.data(), nh, D, D, compute::ActRound::HadamardFp4);
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D * nh)));
  std::vector<float> wh(static_cast<size_t>(nh));
  for (int64_t h = 0; h < nh; ++h) wh[h] = w_idx[h] * scale;
  std::vector<float> score(static_cast<size_t>(n_rows));
  be_.indexer_scores(q.data(), wh.data(), nh, D, S.index.rows.data(), n_rows, score.data());
  std::vector<int64_t> idx(static_cast<size_t>(n_rows));
  std::iota(idx.begin(), idx.end(), 0);
  const int64_t k = std::min(hp_.indexer_top_k, n_rows);
  // Highest score first; equal scores keep the lower row (ds4's tie rule).
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int64_t a, int64_t b) {
    return score[a] > score[b] || (score[a] == score[b] && a < b);
  });
  idx.resize(static_cast<size_t>(k));
  std::sort(idx.begin(), idx.end());
  return idx;
}

void Forward::attention_layer(int64_t il, const std::vector<float>& X, std::vector<float>& Xout) {
  const LayerWeights& L = w_.layers[static_cast<size_t>(il)];
  LayerState& S = st_.layers[static_cast<size_t>(il)];
  const int64_t d = hp_.n_embd, hd = hp_.head_dim, nh = hp_.n_head, R = hp_.ratio(il);
  const int64_t win = hp_.sliding_window;
  const std::vector<double>& freqs = R > 0 ? m_.freqs_compressed_ : m_.freqs_swa_;
  const bool sim = m_.opt_.act_quant_sim;

  HcMix mix = hc_pre(L.hc_attn_fn, L.hc_attn_base, L.hc_attn_scale, X);
  std::vector<float> a(static_cast<size_t>(n_ * d));
  be_.rms_norm(mix.x_in.data(), L.attn_norm, d, n_, hp_.rms_eps, a.data());

  std::vector<float> qr = project(be_, L.q_a, a, n_);
  be_.rms_norm(qr.data(), L.q_a_norm, hp_.q_lora_rank, n_, hp_.rms_eps, qr.data());
  std::vector<float> q = project(be_, L.q_b, qr, n_);
  be_.rms_norm(q.data(), nullptr, hd, n_ * nh, hp_.rms_eps, q.data());  // per head, no weight (trap 6)
  std::vector<float> kv = project(be_, L.kv, a, n_);
  be_.rms_norm(kv.data(), L.kv_norm, hd, n_, hp_.rms_eps, kv.data());

  std::vector<float> ckv, csc, ikv, isc, iq, iw;
  if (L.has_compressor) {
    ckv = project(be_, L.comp.kv, a, n_);
    csc = project(be_, L.comp.gate, a, n_);
  }
  bool need_index_scores = false;
  if (L.has_indexer) {
    ikv = project(be_, L.idx_comp.kv, a, n_);
    isc = project(be_, L.idx_comp.gate, a, n_);
    // Scoring only matters once some query of the batch sees more rows than top-k.
    need_index_scores = (p0_ + n_) / R > hp_.indexer_top_k;
    if (need_index_scores) {
      iq = project(be_, L.idx_q_b, qr, n_);
      iw = project(be_, L.idx_proj, a, n_);
    }
  }

  std::vector<float> heads(static_cast<size_t>(n_ * nh * hd));
  std::vector<const float*> rows;
  for (int64_t t = 0; t < n_; ++t) {
    const int64_t p = p0_ + t;
    float* qt = q.data() + t * nh * hd;
    float* kvt = kv.data() + t * hd;
    be_.rope_tail(qt, nh, hd, freqs, p, false);
    be_.rope_tail(kvt, 1, hd, freqs, p, false);
    if (sim) be_.act_round(kvt, 1, hd, hd - hp_.n_rot, compute::ActRound::Fp8);
    std::memcpy(S.raw.data() + (p % win) * hd, kvt, static_cast<size_t>(hd) * sizeof(float));

    if (L.has_compressor)
      compressor_step(L.comp, S.attn, ckv.data() + t * S.attn.width(), csc.data() + t * S.attn.width(), p, false);
    if (L.has_indexer)
      compressor_step(L.idx_comp, S.index, ikv.data() + t * S.index.width(), isc.data() + t * S.index.width(), p, true);

    // Keys/values: the raw window (current token included) plus visible compressed rows.
    rows.clear();
    for (int64_t pp = std::max<int64_t>(0, p - win + 1); pp <= p; ++pp) rows.push_back(S.raw.data() + (pp % win) * hd);
    if (L.has_compressor) {
      const int64_t n_comp = S.attn.n_rows();  // == (p+1)/R: rows are emitted at window ends
      if (L.has_indexer && n_comp > hp_.indexer_top_k) {
        if (!need_index_scores) fail("deepseek4: internal: indexer scores not computed for layer {}", il);
        for (int64_t c : indexer_select(il, iq.data() + t * hp_.indexer_n_head * hp_.indexer_head_dim,
                                        iw.data() + t * hp_.indexer_n_head, p))
          rows.push_back(S.attn.rows.data() + c * hd);
      } else {
        for (int64_t c = 0; c < n_comp; ++c) rows.push_back(S.attn.rows.data() + c * hd);
      }
    }
    float* ht = heads.data() + t * nh * hd;
    be_.sink_attention(qt, nh, hd, {rows.data(), static_cast<int64_t>(rows.size())}, L.sinks,
                       static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd))), ht);
    be_.rope_tail(ht, nh, hd, freqs, p, true);  // undo the query-position rotation (trap 5)
  }

  // Grouped low-rank output: group g maps its heads' concatenation to o_lora_rank values.
  const int64_t G = hp_.o_groups, rank = hp_.o_lora_rank, group_in = nh / G * hd;
  std::vector<float> gin(static_cast<size_t>(n_ * group_in)), gout(static_cast<size_t>(n_ * rank));
  std::vector<float> low(static_cast<size_t>(n_ * G * rank));
  for (int64_t g = 0; g < G; ++g) {
    for (int64_t t = 0; t < n_; ++t)
      std::memcpy(gin.data() + t * group_in, heads.data() + t * nh * hd + g * group_in,
                  static_cast<size_t>(group_in) * sizeof(float));
    be_.matmul(L.out_a.rows(g * rank, rank), gin.data(), n_, gout.data());
    for (int64_t t = 0; t < n_; ++t)
      std::memcpy(low.data() + t * G * rank + g * rank, gout.data() + t * rank, static_cast<size_t>(rank) * sizeof(float));
  }
  std::vector<float> out = project(be_, L.out_b, low, n_);
  hc_post(mix, out, X, Xout);
}

}  // namespace ds4::model::deepseek4
