// Default bodies of the position-explicit ops, of the fusable composite ops, of the
// step-graph hooks and of the device-tier memory hook (backend.h). The CPU
// backend runs these; a device backend that records decode steps overrides them.
#include "compute/backend.h"
#include "core/error.h"

namespace ds4::compute {

uint8_t* Backend::alloc_weight_slots(size_t bytes, const std::string& what) {
  fail("{}: the {} backend has no device memory for {} bytes of expert slots", what, name(), bytes);
}

void Backend::store_row(float* ring, int64_t ring_rows, int64_t n, int64_t pos, const float* src) {
  if (ring_rows <= 0 || pos < 0) fail("store_row: ring of {} rows, position {}", ring_rows, pos);
  copy(ring + (pos % ring_rows) * n, src, static_cast<size_t>(n) * sizeof(float));
}

void Backend::compressor_emit(const CompressorEmit& e, int64_t pos) {
  const int64_t R = e.ratio, D = e.dim, W = e.lanes * e.dim;
  if (R <= 0 || (pos + 1) % R != 0) return;
  float* y = e.rows + ((pos + 1) / R - 1) * D;
  compressor_pool(e.kv, e.score, R, e.lanes, D, y);
  rms_norm(y, e.norm, D, 1, e.eps, y);
  rope_tail(y, 1, 1, D, e.freqs, pos + 1 - R, 0, false);
  if (e.round) act_round(y, 1, D, e.n_round, e.round_kind);
  if (e.lanes == 2) {
    // The current window becomes the previous one for the next emission.
    copy(e.kv, e.kv + R * W, static_cast<size_t>(R * W) * sizeof(float));
    copy(e.score, e.score + R * W, static_cast<size_t>(R * W) * sizeof(float));
  }
}

void Backend::compressor_chunk(const Matrix& ape, const CompressorEmit& e, int64_t pos0, int64_t count,
                               const float* kvp, const float* scp) {
  const int64_t W = e.lanes * e.dim;
  for (int64_t t = 0; t < count; ++t) {
    compressor_store(ape, pos0 + t, e.ratio, e.lanes, kvp + t * W, scp + t * W, W, e.kv, e.score);
    compressor_emit(e, pos0 + t);
  }
}

void Backend::indexer_chunk(const IndexerChunk& c, int64_t pos0, int64_t count) {
  if (c.ratio <= 0) fail("indexer_chunk: ratio {}", c.ratio);
  const int64_t qn = c.n_heads * c.head_dim;
  // Sized for the capacity, not this query's count, as the decode step sizes them.
  Buffer<float> q(*this, static_cast<size_t>(qn)), score(*this, static_cast<size_t>(c.capacity));
  for (int64_t t = 0; t < count; ++t) {
    const int64_t p = pos0 + t;
    const RowCount n = RowCount::at(p, c.ratio, c.capacity);
    if (n.n <= c.k) continue;
    copy(q.data(), c.q + t * qn, static_cast<size_t>(qn) * sizeof(float));
    rope_tail(q.data(), 1, c.n_heads, c.head_dim, c.freqs, p, 0, false);
    if (c.round) act_round(q.data(), c.n_heads, c.head_dim, c.head_dim, ActRound::HadamardFp4);
    indexer_scores(q.data(), c.w + t * c.n_heads, c.scale, c.n_heads, c.head_dim, c.keys, n, score.data());
    top_k(score.data(), n, c.k, c.idx + t * c.k);
  }
}

void Backend::attention_chunk(const float* q, int64_t n_heads, int64_t head_dim, const AttnChunk& kv, int64_t pos0,
                              int64_t count, const float* sinks, float scale, float* out) {
  const int64_t qn = n_heads * head_dim;
  for (int64_t t = 0; t < count; ++t) {
    const int64_t p = pos0 + t;
    store_row(kv.ring, kv.window, head_dim, p, kv.fresh + t * head_dim);
    attention(q + t * qn, n_heads, head_dim, kv.at(t, p), sinks, scale, out + t * qn);
  }
}

void Backend::hc_post_add(float* y, const float* y2, const float* X, const float* post, const float* comb,
                          int64_t rows, int n_hc, int64_t n, float* Xout) {
  add(y, y2, rows * n);
  hc_post(y, X, post, comb, rows, n_hc, n, Xout);
}

void Backend::moe_router(const Matrix& router, const float* x, int64_t rows, const int32_t* tokens,
                         const RouteParams& p, float* logits, int32_t* experts, float* weights) {
  matmul(router, x, rows, logits);
  moe_route(logits, tokens, rows, p, experts, weights);
}

void Backend::hc_pre_norm(const Matrix& fn, const float* X, float* mix, int64_t rows, const HcParams& p, bool norm,
                          const float* norm_w, float norm_eps, float* x_in, float* post, float* comb) {
  matmul(fn, X, rows, mix);
  hc_pre(X, mix, rows, p, x_in, post, comb);
  if (norm) rms_norm(x_in, norm_w, p.n, rows, norm_eps, x_in);
}

void Backend::attn_qkv_prep(float* q, float* kv, int64_t rows, int64_t n_heads, int64_t head_dim, const float* kv_norm,
                            float eps, std::span<const double> freqs, int64_t pos0, int64_t n_round) {
  rms_norm(q, nullptr, head_dim, rows * n_heads, eps, q);
  rms_norm(kv, kv_norm, head_dim, rows, eps, kv);
  rope_tail(q, rows, n_heads, head_dim, freqs, pos0, 1, false);
  rope_tail(kv, rows, 1, head_dim, freqs, pos0, 1, false);
  if (n_round > 0) act_round(kv, rows, head_dim, n_round, ActRound::Fp8);
}

const int32_t* Backend::step_record_begin(const StepKey&, int64_t, int32_t, std::span<const int32_t>) {
  fail("the {} backend does not record decode steps", name());
}

const float* Backend::step_record_end(const float*) { fail("the {} backend does not record decode steps", name()); }

}  // namespace ds4::compute
