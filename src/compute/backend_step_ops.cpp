// Default bodies of the position-explicit ops, of the fusable composite ops and of the
// step-graph hooks (backend.h). The CPU
// backend runs these; a device backend that records decode steps overrides them.
#include "compute/backend.h"
#include "core/error.h"

namespace ds4::compute {

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

void Backend::hc_pre_norm(const Matrix& fn, const float* X, float* mix, int64_t rows, const HcParams& p, bool norm,
                          const float* norm_w, float norm_eps, float* x_in, float* post, float* comb) {
  matmul(fn, X, rows, mix);
  hc_pre(X, mix, rows, p, x_in, post, comb);
  if (norm) rms_norm(x_in, norm_w, p.n, rows, norm_eps, x_in);
}

const int32_t* Backend::step_record_begin(const StepKey&, int64_t, int32_t) {
  fail("the {} backend does not record decode steps", name());
}

const float* Backend::step_record_end(const float*) { fail("the {} backend does not record decode steps", name()); }

}  // namespace ds4::compute
