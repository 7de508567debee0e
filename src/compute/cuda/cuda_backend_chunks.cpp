// The CUDA backend's chunk ops (prefill): one launch (or a few) per op for a chunk of positions
// (cuda_backend_impl.h has the class).
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>

#include "compute/cuda/cuda_backend_impl.h"
#include "compute/cuda/cuda_launch.h"
#include "core/error.h"

namespace ds4::compute {

using cuda::check;

// ---- chunks of positions (prefill) --------------------------------------------------------------
// One launch (or a few) per op for the whole chunk; a single token, a recorded step and
// DS4_CUDA_CHUNK=0 take the base class's token loop over the single ops.

void CudaBackend::compressor_chunk(const Matrix& ape, const CompressorEmit& e, int64_t pos0, int64_t count,
                                   const float* kvp, const float* scp) {
  if (count <= 1 || rec_ || !chunk_ops_) return Backend::compressor_chunk(ape, e, pos0, count, kvp, scp);
  qact_forget();
  const int64_t R = e.ratio, D = e.dim;
  if (R <= 0 || pos0 < 0 || (e.lanes != 1 && e.lanes != 2))
    fail("CUDA compressor_chunk: ratio {}, {} lanes, position {}", R, e.lanes, pos0);
  if (ape.type != GgmlType::F32 && ape.type != GgmlType::F16 && ape.type != GgmlType::BF16)
    fail("CUDA compressor_chunk: ape type {} is not a float type", traits(ape.type).name);
  if (ape.n_out < R || e.lanes * D > ape.n_in)
    fail("CUDA compressor_chunk: ape is {} x {} for ratio {} and width {}", ape.n_out, ape.n_in, R, e.lanes * D);
  const cuda::DevMatrix a = dev_matrix(ape, "compressor_chunk", "ape");
  {
    Prof prof(this, "compressor_chunk");
    cuda::compressor_chunk_pool(ape.type, a.data, a.row_stride, pos0, count, R, e.lanes, D, kvp, scp, e.kv, e.score,
                                e.rows, stream_);
  }
  const int64_t first_row = pos0 / R, n_emit = (pos0 + count) / R - first_row;
  if (n_emit > 0) {
    float* y = e.rows + first_row * D;
    rms_norm(y, e.norm, D, n_emit, e.eps, y);
    rope_tail(y, n_emit, 1, D, e.freqs, first_row * R, R, false);  // row r's window starts at r*R
    if (e.round) act_round(y, n_emit, D, e.n_round, e.round_kind);
  }
  Prof prof(this, "compressor_chunk");
  cuda::compressor_chunk_state(ape.type, a.data, a.row_stride, pos0, count, R, e.lanes, D, kvp, scp, e.kv, e.score,
                               stream_);
}

void CudaBackend::indexer_chunk(const IndexerChunk& c, int64_t pos0, int64_t count) {
  if (count <= 1 || rec_ || !chunk_ops_) return Backend::indexer_chunk(c, pos0, count);
  qact_forget();
  if (c.ratio <= 0 || pos0 < 0) fail("CUDA indexer_chunk: ratio {}, position {}", c.ratio, pos0);
  // Queries from the first that sees more than k keys.
  const int64_t first = std::max<int64_t>(0, (c.k + 1) * c.ratio - 1 - pos0);
  if (first >= count) return;
  const int64_t n = count - first, p = pos0 + first, qn = c.n_heads * c.head_dim;
  const int64_t max_keys = (pos0 + count) / c.ratio;
  if (max_keys > c.capacity) fail("CUDA indexer_chunk: {} keys above the capacity {}", max_keys, c.capacity);
  Buffer<float> q(*this, static_cast<size_t>(n * qn));
  copy(q.data(), c.q + first * qn, static_cast<size_t>(n * qn) * sizeof(float));
  rope_tail(q.data(), n, c.n_heads, c.head_dim, c.freqs, p, 1, false);
  if (c.round) act_round(q.data(), n * c.n_heads, c.head_dim, c.head_dim, ActRound::HadamardFp4);
  // Scores of up to `group` queries at a time (max_keys apart), bounded to 256 MiB.
  const int64_t group = std::clamp<int64_t>((int64_t{64} << 20) / std::max<int64_t>(1, max_keys), 1, 65535);
  Buffer<float> score(*this, static_cast<size_t>(std::min(group, n) * max_keys));
  for (int64_t g0 = 0; g0 < n; g0 += group) {
    const int64_t m = std::min(group, n - g0);
    const cuda::DevCount keys{{nullptr, p + g0}, c.ratio, 0};
    {
      Prof prof(this, "indexer_scores (chunk)");
      cuda::indexer_scores(q.data() + g0 * qn, c.w + (first + g0) * c.n_heads, c.scale, c.n_heads, c.head_dim, c.keys,
                           keys, max_keys, score.data(), stream_, m, c.k);
    }
    Prof prof(this, "top_k (chunk)");
    cuda::top_k(score.data(), keys, max_keys, c.k, c.idx + (first + g0) * c.k, stream_, m, c.k);
  }
}

void CudaBackend::attention_chunk(const float* q, int64_t n_heads, int64_t head_dim, const AttnChunk& kv,
                                  int64_t pos0, int64_t count, const float* sinks, float scale, float* out) {
  if (count == 1 && attn_store_)  // the default body's one iteration, its store_row in the attention
    return attend(q, n_heads, head_dim, kv.at(0, pos0), sinks, scale, out, kv.fresh, kv.ring);
  if (count <= 1 || rec_ || !chunk_ops_)
    return Backend::attention_chunk(q, n_heads, head_dim, kv, pos0, count, sinks, scale, out);
  qact_forget();
  if (kv.window <= 0 || pos0 < 0) fail("CUDA attention_chunk: window {} / position {}", kv.window, pos0);
  if (kv.comp && kv.ratio <= 0) fail("CUDA attention_chunk: compressed rows without a ratio");
  const int64_t last = pos0 + count - 1;
  const int64_t max_comp = kv.comp ? (last + 1) / kv.ratio : 0;
  if (kv.comp && max_comp > kv.comp_capacity)
    fail("CUDA attention_chunk: {} compressed rows above the capacity {}", max_comp, kv.comp_capacity);
  cuda::AttnRows r;
  r.ring = kv.ring;
  r.window = kv.window;
  r.pos = cuda::DevPos{nullptr, pos0};
  r.comp = kv.comp;
  r.n_comp = kv.comp ? cuda::DevCount{{nullptr, pos0}, kv.ratio, 0} : cuda::DevCount{{}, 0, 0};
  r.idx = kv.comp ? kv.idx : nullptr;
  r.n_idx = kv.n_idx;
  r.idx_per_query = true;
  r.fresh = kv.fresh;
  r.fresh_pos0 = cuda::DevPos{nullptr, pos0};
  // An indexed query visits n_idx rows, any other at most max_comp (<= n_idx when idx is given).
  const int64_t n_sel = !kv.comp ? 0 : kv.idx ? std::min(kv.n_idx, max_comp) : max_comp;
  r.max_rows = std::min(kv.window, last + 1) + n_sel;
  const float* s = weight_f(sinks, n_heads, "attention", "sinks");
  if (!s) fail("CUDA attention_chunk: sinks are required");
  {
    Prof prof(this, "attention (chunk)");
    cuda::attention(q, n_heads, head_dim, r, s, scale, out, d_err_, stream_, count);
  }
  Prof prof(this, "store_rows");
  cuda::store_rows(kv.ring, kv.window, head_dim, pos0, count, kv.fresh, stream_);
}

}  // namespace ds4::compute
