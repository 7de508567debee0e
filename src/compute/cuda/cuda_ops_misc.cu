// Element-wise and small model-shaped kernels of the CUDA backend: fill, add, RMSNorm, RoPE,
// the FP8 / Hadamard+FP4 roundings, SwiGLU, embedding lookup and the compressor's store/pool
// (hyper-connections: cuda_ops_hc.cu). Each kernel performs the CPU backend's float operations in the
// CPU's order (see cuda_util.cuh on --fmad=false), so results are bit-exact except where a
// comment says otherwise.
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "compute/cuda/cpu_order.cuh"
#include "compute/cuda/cuda_launch.h"
#include "compute/cuda/cuda_norm.cuh"
#include "compute/cuda/cuda_ops.h"
#include "compute/cuda/cuda_util.cuh"
#include "compute/cuda/gemv_internal.h"
#include "compute/cuda/swiglu.cuh"
#include "core/error.h"

namespace ds4::cuda {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) fail("CUDA {}: {}", what, cudaGetErrorString(e));
}

void check_launch(const char* kernel) {
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess)
    fail("CUDA kernel {} failed to launch: {}{}", kernel, cudaGetErrorString(e),
         e == cudaErrorInvalidConfiguration || e == cudaErrorInvalidValue || e == cudaErrorLaunchOutOfResources
             ? ""
             : " (an earlier kernel on the stream may have failed)");
}

bool pdl_enabled() {
  static const bool on = [] {
    const char* e = std::getenv("DS4_CUDA_PDL");
    return e && std::strcmp(e, "1") == 0;
  }();
  return on;
}

unsigned grid_for(int64_t n, int threads) {
  int64_t g = (n + threads - 1) / threads;
  if (g > 0x7fffffff) fail("CUDA: {} elements exceed one grid", n);
  return static_cast<unsigned>(g < 1 ? 1 : g);
}

namespace {

// ---- fill / add -----------------------------------------------------------------------------

__global__ void k_fill(float* x, int64_t n, float v) {
  pdl_begin();
  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) x[i] = v;
}

__global__ void k_add(float* y, const float* x, int64_t n) {
  pdl_begin();
  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) y[i] = y[i] + x[i];
}

// ---- RMSNorm: one block per row; sum of squares in double (exact products) -----------------

// q: the Q8_0 copy of a one-row output (n % 32 == 0), or none.
__global__ void k_rms_norm(const float* x, const float* w, int64_t n, float eps, float* y, Q8Out q) {
  pdl_begin();
  const float* xr = x + blockIdx.x * n;
  rms_store(xr, w, n, block_inv_rms(xr, n, eps), y + blockIdx.x * n, q);
}

// Many short rows (the per-head q norm: 64 rows of 512 per token): a warp per row, 8 per block.
// One 1024-thread block per row there leaves most threads idle and pays two barriers per row.
// The sum of squares is in double: a partition other than the CPU's (a sequential sum) moves
// the float result only when the double sum lies within ~1e-13 of a float rounding boundary,
// as with the block kernel's partition.
__global__ void k_rms_norm_warps(const float* x, const float* w, int64_t n, int64_t rows, float eps, float* y) {
  pdl_begin();
  const int64_t r = static_cast<int64_t>(blockIdx.x) * 8 + (threadIdx.x >> 5);
  if (r >= rows) return;  // whole warp
  const int lane = threadIdx.x & 31;
  const float* xr = x + r * n;
  const float inv = inv_rms_of(warp_sum(sumsq_strided(xr, n, lane, 32)), n, eps);
  rms_store_strided(xr, w, n, inv, y + r * n, lane, 32);
}

// ---- RoPE on the tail of each head: one block per row; cos/sin in double, then float -------

// cos and sin of pos * freq, each computed in double and rounded to float once; inverse negates
// the sine first (the CPU's tables: -float(s) == float(-s)).
__device__ inline float2 rope_cs(double pos, double freq, bool inverse) {
  const double th = pos * freq, sn = sin(th);
  return make_float2(static_cast<float>(cos(th)), static_cast<float>(inverse ? -sn : sn));
}
// The pair (x0, x1) rotated by cs: two products and a sum each (no FMA contraction in this file).
__device__ inline float rope_x0(float x0, float x1, float2 cs) { return x0 * cs.x - x1 * cs.y; }
__device__ inline float rope_x1(float x0, float x1, float2 cs) { return x0 * cs.y + x1 * cs.x; }

__global__ void k_rope_tail(float* x, int64_t n_heads, int64_t head_dim, const double* freqs, int n_pairs,
                            DevPos pos0, int64_t pos_step, bool inverse) {
  pdl_begin();
  extern __shared__ float cs[];  // [n_pairs] cos, then [n_pairs] sin
  const int64_t r = blockIdx.x;
  const double pos = static_cast<double>(pos0.get() + r * pos_step);
  for (int k = threadIdx.x; k < n_pairs; k += blockDim.x) {
    const float2 v = rope_cs(pos, freqs[k], inverse);
    cs[k] = v.x;
    cs[n_pairs + k] = v.y;
  }
  __syncthreads();
  const int64_t first = head_dim - 2 * n_pairs;
  float* xr = x + r * n_heads * head_dim;
  // blockIdx.y: this block's share of the row's pairs (one load round trip per thread, not one
  // per head: a single block per row spent ~4 us waiting on its loads for 64 heads).
  const int64_t per_block = (n_heads * n_pairs + gridDim.y - 1) / gridDim.y;
  const int64_t t_end = min(n_heads * n_pairs, (blockIdx.y + 1) * per_block);
  for (int64_t t = blockIdx.y * per_block + threadIdx.x; t < t_end; t += blockDim.x) {
    const int64_t h = t / n_pairs;
    const int k = static_cast<int>(t % n_pairs);
    float* p = xr + h * head_dim + first + 2 * k;
    const float x0 = p[0], x1 = p[1];
    const float2 c = make_float2(cs[k], cs[n_pairs + k]);
    p[0] = rope_x0(x0, x1, c);
    p[1] = rope_x1(x0, x1, c);
  }
}

// One row (decode) with its Q8_0 copy: a warp per 32-value block (head_dim even, n % 32 == 0,
// so a RoPE pair is two adjacent lanes of one block), k_rope_tail's arithmetic per pair, then the
// block's Q8_0 quantization (quantize_row_q8_0) of the rotated values for the next matmul.
__global__ void k_rope_tail_q8(float* x, int64_t n, int64_t head_dim, const double* freqs, int n_pairs, DevPos pos0,
                               bool inverse, Q8Out q) {
  pdl_begin();
  const int64_t b = static_cast<int64_t>(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5);
  if (b * 32 >= n) return;  // whole warp
  const int lane = threadIdx.x & 31;
  const int64_t i = 32 * b + lane, c = i % head_dim, first = head_dim - 2 * n_pairs;
  float v = x[i];
  const float other = __shfl_xor_sync(kFull, v, 1);
  if (c >= first) {
    const float2 cs = rope_cs(static_cast<double>(pos0.get()), freqs[(c - first) / 2], inverse);
    v = (lane & 1) == 0 ? rope_x0(v, other, cs) : rope_x1(other, v, cs);
    x[i] = v;
  }
  q8_0_block_warp(v, lane, q.qs + 32 * b, q.d + b);
}

// ---- FP8 E4M3 / FP4 E2M1 round trips and the Hadamard transform (compute/numerics.cpp) -----

__device__ inline float round_to_step_even(float ax, float step) {
  float q = ax / step;  // exact: step is a power of two
  float f = floorf(q);
  float frac = q - f;
  if (frac > 0.5f || (frac == 0.5f && fmodf(f, 2.0f) != 0.0f)) f += 1.0f;
  return f * step;
}

__device__ inline float pow2_ceil(float v) {
  int e;
  float m = frexpf(v, &e);
  if (m == 0.5f) return ldexpf(1.0f, e - 1);
  return ldexpf(1.0f, e);
}

__device__ inline float e4m3_round(float x) {
  if (isnan(x)) return x;
  float ax = fabsf(x);
  if (ax >= 448.0f) return copysignf(448.0f, x);
  float step;
  if (ax < ldexpf(1.0f, -6)) {
    step = ldexpf(1.0f, -9);
  } else {
    int e;
    frexpf(ax, &e);
    step = ldexpf(1.0f, e - 1 - 3);
  }
  float r = round_to_step_even(ax, step);
  if (r > 448.0f) r = 448.0f;
  return copysignf(r, x);
}

__device__ inline float e2m1_round(float x) {
  if (isnan(x)) return x;
  float ax = fabsf(x);
  if (ax >= 6.0f) return copysignf(6.0f, x);
  float step = ax < 2.0f ? 0.5f : (ax < 4.0f ? 1.0f : 2.0f);
  return copysignf(round_to_step_even(ax, step), x);
}

// The FP8 round trip of the 64-value block v[b0 .. b0+64) (clipped at n_round) by one warp, two
// values per lane. The CPU's max ignores NaN (std::max(amax, NaN) == amax), as fmaxf does.
__device__ inline void fp8_block_round(float* v, int b0, int n_round, int lane) {
  const int i0 = b0 + lane, i1 = b0 + 32 + lane;
  const bool ok0 = i0 < n_round, ok1 = i1 < n_round;
  float a = 0;
  if (ok0) a = fmaxf(a, fabsf(v[i0]));
  if (ok1) a = fmaxf(a, fabsf(v[i1]));
  a = warp_max(a);
  a = std_max(a, 1e-4f);
  const float s = pow2_ceil(a / 448.0f);
  if (ok0) v[i0] = e4m3_round(std_clamp(v[i0] / s, -448.0f, 448.0f)) * s;
  if (ok1) v[i1] = e4m3_round(std_clamp(v[i1] / s, -448.0f, 448.0f)) * s;
}

// One block per row; the row's first n_round values in shared memory. Warps take blocks of
// 64 (FP8, two values per lane) or 32 (FP4, one per lane).
__global__ void k_act_round(float* x, int64_t row_len, int n_round, int kind, float hscale) {
  pdl_begin();
  extern __shared__ float v[];
  float* xr = x + blockIdx.x * row_len;
  for (int i = threadIdx.x; i < n_round; i += blockDim.x) v[i] = xr[i];
  __syncthreads();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  if (kind == 0) {
    for (int b0 = warp * 64; b0 < n_round; b0 += nw * 64) fp8_block_round(v, b0, n_round, lane);
  } else {
    // Butterflies with strides 1, 2, 4, ...: pair p of stage h is (i, i+h), i = (p/h)*2h + p%h.
    for (int h = 1; h < n_round; h *= 2) {
      for (int p = threadIdx.x; p < n_round / 2; p += blockDim.x) {
        const int i = (p / h) * 2 * h + (p % h);
        const float a = v[i], b = v[i + h];
        v[i] = a + b;
        v[i + h] = a - b;
      }
      __syncthreads();
    }
    for (int i = threadIdx.x; i < n_round; i += blockDim.x) v[i] *= hscale;
    __syncthreads();
    const float floor_amax = 6.0f * ldexpf(1.0f, -126);
    for (int b0 = warp * 32; b0 < n_round; b0 += nw * 32) {
      const int i = b0 + lane;
      const bool ok = i < n_round;
      float a = ok ? fabsf(v[i]) : 0.0f;
      a = warp_max(a);
      a = std_max(a, floor_amax);
      const float s = pow2_ceil(a / 6.0f);
      if (ok) v[i] = e2m1_round(std_clamp(v[i] / s, -6.0f, 6.0f)) * s;
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < n_round; i += blockDim.x) xr[i] = v[i];
}

// ---- attn_qkv_prep: q head norms, kv norm, RoPE on both, kv's FP8 round trip, one launch ----

// Token blockIdx.y: warp w of blocks 0..nq-1 takes q head w, held in the warp's shared-memory
// row; block nq takes kv: its warp 0 norms and rotates it, then every warp rounds its share of
// the FP8 blocks (one warp for all of them was the kernel's longest chain). Each step is the
// arithmetic of the kernel it replaces: k_rms_norm_warps (lane-strided double sum of squares),
// k_rope_tail (cos/sin in double, rounded to float), k_act_round's FP8 blocks.
constexpr int kPrepWarps = 8;

// One row of hd values in v (shared memory), by one warp: y = x * inv (* w), then RoPE on the tail.
__device__ inline void prep_row(const float* xr, const float* w, int64_t hd, float eps, const double* freqs,
                                int n_pairs, double pos, float* v, int lane) {
  const float inv = inv_rms_of(warp_sum(sumsq_strided(xr, hd, lane, 32)), hd, eps);
  for (int64_t i = lane; i < hd; i += 32) v[i] = w ? __fmul_rn(__fmul_rn(xr[i], inv), w[i]) : __fmul_rn(xr[i], inv);
  __syncwarp();
  float* tail = v + (hd - 2 * n_pairs);
  for (int k = lane; k < n_pairs; k += 32) {
    const float2 cs = rope_cs(pos, freqs[k], false);
    const float x0 = tail[2 * k], x1 = tail[2 * k + 1];
    tail[2 * k] = rope_x0(x0, x1, cs);
    tail[2 * k + 1] = rope_x1(x0, x1, cs);
  }
  __syncwarp();
}

__global__ void __launch_bounds__(32 * kPrepWarps)
    k_attn_qkv_prep(float* q, float* kv, int64_t n_heads, int64_t hd, const float* kv_norm, float eps,
                    const double* freqs, int n_pairs, DevPos pos0, int n_round) {
  pdl_begin();
  extern __shared__ float prep_rows[];  // kPrepWarps x hd
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t t = blockIdx.y, nq = (n_heads + kPrepWarps - 1) / kPrepWarps;
  const double pos = static_cast<double>(pos0.get() + t);
  if (blockIdx.x < nq) {
    const int64_t h = static_cast<int64_t>(blockIdx.x) * kPrepWarps + warp;
    if (h >= n_heads) return;  // whole warp
    float* xr = q + (t * n_heads + h) * hd;
    float* v = prep_rows + warp * hd;
    prep_row(xr, nullptr, hd, eps, freqs, n_pairs, pos, v, lane);
    for (int64_t i = lane; i < hd; i += 32) xr[i] = v[i];
    return;
  }
  float* xr = kv + t * hd;
  if (warp == 0) prep_row(xr, kv_norm, hd, eps, freqs, n_pairs, pos, prep_rows, lane);
  __syncthreads();
  for (int b0 = warp * 64; b0 < n_round; b0 += kPrepWarps * 64) fp8_block_round(prep_rows, b0, n_round, lane);
  __syncthreads();
  for (int64_t i = threadIdx.x; i < hd; i += blockDim.x) xr[i] = prep_rows[i];
}

// ---- SwiGLU ---------------------------------------------------------------------------------

// q: the Q8_0 copy of a one-row output (n % 32 == 0, so whole warps stay or leave), or none.
__global__ void k_swiglu(const float* g, const float* u, int64_t rows, int64_t n, float limit, const float* weights,
                         float* h, Q8Out q) {
  pdl_begin();
  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i >= rows * n) return;
  const float v = swiglu_cpu(g[i], u[i], limit, weights ? weights[i / n] : 1.0f);  // swiglu.cuh
  h[i] = v;
  if (q.qs) q8_0_block_warp(v, static_cast<int>(i & 31), q.qs + (i & ~int64_t{31}), q.d + i / 32);
}

// ---- embedding lookup: one block per token --------------------------------------------------

__device__ inline float decode_elem(int type, const uint8_t* row, int64_t i) {
  switch (type) {
    case 0:
    case 1:
    case 30: return float_row_elem(type, row, i);
    case 8: {  // Q8_0: {f16 d; i8 q[32]}
      const uint8_t* blk = row + (i / 32) * 34;
      return static_cast<float>(reinterpret_cast<const int8_t*>(blk + 2)[i % 32]) * h2f(ld16(blk));
    }
    case 10: {  // Q2_K: {u8 scales[16]; u8 qs[64]; f16 d; f16 dmin}
      const uint8_t* blk = row + (i / 256) * 84;
      const int j = static_cast<int>(i % 256);
      const int hh = j / 128, w = j % 128, s = w / 32, t = w % 32;
      const int q = (blk[16 + 32 * hh + t] >> (2 * s)) & 3;
      const uint8_t sc = blk[8 * hh + 2 * s + (t >= 16)];
      const float dl = h2f(ld16(blk + 80)) * (sc & 15), ml = h2f(ld16(blk + 82)) * (sc >> 4);
      return dl * static_cast<float>(q) - ml;
    }
    case 12: {  // Q4_K: {f16 d; f16 dmin; u8 scales[12]; u8 qs[128]}
      const uint8_t* blk = row + (i / 256) * 144;
      const int e = static_cast<int>(i % 256), j = e / 32, t = e % 32;
      const uint8_t* sc = blk + 4;
      int s, m;
      if (j < 4) {
        s = sc[j] & 63;
        m = sc[j + 4] & 63;
      } else {
        s = (sc[j + 4] & 15) | ((sc[j - 4] >> 6) << 4);
        m = (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4);
      }
      const float dl = h2f(ld16(blk)) * static_cast<float>(s), ml = h2f(ld16(blk + 2)) * static_cast<float>(m);
      const uint8_t byte = blk[16 + 32 * (j / 2) + t];
      const int q = (j % 2) ? (byte >> 4) : (byte & 15);
      return dl * static_cast<float>(q) - ml;
    }
  }
  return __int_as_float(0x7fc00000);  // unreachable: the host validates the type
}

__global__ void k_embed(int type, const uint8_t* table, int64_t n_in, int64_t n_rows, size_t row_stride,
                        const int32_t* tokens, int copies, float* X, int* err) {
  pdl_begin();
  const int64_t t = blockIdx.x;
  const int32_t tok = tokens[t];
  if (tok < 0 || tok >= n_rows) {
    if (threadIdx.x == 0 && atomicCAS(err, 0, kErrEmbedToken) == 0) err[1] = tok;
    return;
  }
  const uint8_t* row = table + static_cast<size_t>(tok) * row_stride;
  float* x0 = X + t * copies * n_in;
  for (int64_t i = threadIdx.x; i < n_in; i += blockDim.x) {
    const float v = decode_elem(type, row, i);
    for (int c = 0; c < copies; ++c) x0[c * n_in + i] = v;
  }
}

// ---- compressor -----------------------------------------------------------------------------

__global__ void k_compressor_store(int ape_type, const uint8_t* ape, size_t ape_stride, DevPos pos, int64_t ratio,
                                   int64_t lanes, const float* kvp, const float* scp, int64_t width, float* kv,
                                   float* score) {
  pdl_begin();
  int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (j >= width) return;
  const int64_t row = pos.get() % ratio, slot = (lanes == 2 ? ratio : 0) + row;
  kv[slot * width + j] = kvp[j];
  score[slot * width + j] = float_row_elem(ape_type, ape + row * ape_stride, j) + scp[j];
}

__global__ void k_compressor_commit(DevPos pos, int64_t ratio, int64_t lanes, int64_t dim, const float* y,
                                    float* rows, float* kv, float* score) {
  pdl_begin();
  const int64_t p = pos.get();
  if ((p + 1) % ratio != 0) return;
  const int64_t half = lanes == 2 ? ratio * lanes * dim : 0;
  float* row = rows + ((p + 1) / ratio - 1) * dim;
  for (int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; j < dim + half; j += (int64_t)gridDim.x * blockDim.x) {
    if (j < dim) {
      row[j] = y[j];
    } else {
      const int64_t i = j - dim;
      kv[i] = kv[half + i];
      score[i] = score[half + i];
    }
  }
}

__global__ void k_store_row(float* ring, int64_t ring_rows, int64_t n, DevPos pos, const float* src) {
  pdl_begin();
  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) ring[(pos.get() % ring_rows) * n + i] = src[i];
}

// One output column of a pool, slots in order (the CPU's order for the max, den and num, with
// no contraction: the CPU adds the rounded products). at(s, c) gives slot s's (kv, score) at
// state column c (the lane's column offset included).
template <class At>
__device__ inline float pool_column(const At& at, int64_t ratio, int64_t lanes, int64_t dim, int64_t j) {
  const int64_t slots = lanes * ratio;
  float m = -INFINITY;
  for (int64_t s = 0; s < slots; ++s) {
    const int64_t col = (lanes == 2 && s >= ratio) ? dim : 0;
    m = std_max(m, at(s, col + j).y);
  }
  if (m == -INFINITY) return 0.0f;
  float den = 0, num = 0;
  for (int64_t s = 0; s < slots; ++s) {
    const int64_t col = (lanes == 2 && s >= ratio) ? dim : 0;
    const float2 v = at(s, col + j);
    const float e = expf_ref(__fsub_rn(v.y, m));
    den = __fadd_rn(den, e);
    num = __fadd_rn(num, __fmul_rn(e, v.x));
  }
  return __fdiv_rn(num, den);
}

// One thread per output column.
__global__ void k_compressor_pool(const float* kv, const float* score, int64_t ratio, int64_t lanes, int64_t dim,
                                  float* out) {
  pdl_begin();
  int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (j >= dim) return;
  const int64_t W = lanes * dim;
  auto at = [&](int64_t s, int64_t c) { return make_float2(kv[s * W + c], score[s * W + c]); };
  out[j] = pool_column(at, ratio, lanes, dim, j);
}

// ---- compressor over a chunk of positions ----------------------------------------------------
// Where the token loop's state slot would hold position pp's values when a window is pooled:
// pp >= pos0 comes from the chunk's projections (the score with its ape bias, as
// compressor_store adds it), older positions from the state as it was before the chunk.
struct ChunkSrc {
  int ape_type;
  const uint8_t* ape;
  size_t ape_stride;
  int64_t pos0, ratio, W;
  const float* kvp;
  const float* scp;
  __device__ float2 fresh(int64_t pp, int64_t c) const {
    const int64_t t = pp - pos0;
    return make_float2(kvp[t * W + c], float_row_elem(ape_type, ape + (pp % ratio) * ape_stride, c) + scp[t * W + c]);
  }
};

// Block (column group, i): the i-th window ending in the chunk, at e = first_end + i*ratio.
// Its slots as the token loop leaves them at e: the current window e-R+1 .. e (slot R + k with
// two lanes, k alone with one); with two lanes the previous window e-2R+1 .. e-R in slots
// 0..R-1, moved there at the emission e-R (inside the chunk: from the current lane the chunk
// started with; before it: the previous lane it started with).
__global__ void k_compressor_chunk_pool(ChunkSrc src, int64_t lanes, int64_t dim, int64_t first_end, const float* kv,
                                        const float* score, float* rows) {
  pdl_begin();
  const int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (j >= dim) return;
  const int64_t R = src.ratio, W = src.W, pos0 = src.pos0;
  const int64_t e = first_end + static_cast<int64_t>(blockIdx.y) * R;
  auto at = [&](int64_t s, int64_t c) {
    const bool prev = lanes == 2 && s < R;
    const int64_t k = lanes == 2 ? (prev ? s : s - R) : s;
    const int64_t pp = prev ? e - 2 * R + 1 + k : e - R + 1 + k;
    if (pp >= pos0) return src.fresh(pp, c);
    const int64_t slot = prev && e - R >= pos0 ? R + k : s;
    return make_float2(kv[slot * W + c], score[slot * W + c]);
  };
  rows[((e + 1) / R - 1) * dim + j] = pool_column(at, R, lanes, dim, j);
}

// Thread (k, c): slot k's column c after the chunk. The current lane holds, per slot, the latest
// position of the chunk with that phase (older: unchanged); with two lanes the previous lane
// holds the window of the chunk's last emission, when there was one.
__global__ void k_compressor_chunk_state(ChunkSrc src, int64_t lanes, int64_t count, float* kv, float* score) {
  pdl_begin();
  const int64_t R = src.ratio, W = src.W, pos0 = src.pos0, last = pos0 + count - 1;
  const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i >= R * W) return;
  const int64_t k = i / W, c = i % W;
  const int64_t cur = (lanes == 2 ? R : 0) + k;
  const float2 old_cur = make_float2(kv[cur * W + c], score[cur * W + c]);
  if (lanes == 2) {
    const int64_t last_end = (last + 1) / R * R - 1;  // the last window end at or before `last`
    if (last_end >= pos0) {
      const int64_t pp = last_end - R + 1 + k;
      const float2 v = pp >= pos0 ? src.fresh(pp, c) : old_cur;
      kv[k * W + c] = v.x, score[k * W + c] = v.y;
    }
  }
  if (last >= k) {
    const int64_t pp = k + (last - k) / R * R;  // the latest position <= last with phase k
    if (pp >= pos0) {
      const float2 v = src.fresh(pp, c);
      kv[cur * W + c] = v.x, score[cur * W + c] = v.y;
    }
  }
}

__global__ void k_store_rows(float* ring, int64_t ring_rows, int64_t n, int64_t pos0, int64_t count, const float* src) {
  pdl_begin();
  const int64_t first = count > ring_rows ? count - ring_rows : 0;
  const int64_t t = first + blockIdx.y;
  const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (t < count && i < n) ring[((pos0 + t) % ring_rows) * n + i] = src[t * n + i];
}

}  // namespace

void fill(float* x, int64_t n, float value, cudaStream_t s) {
  if (n <= 0) return;
  launch(k_fill, grid_for(n, 256), 256, 0, s, x, n, value);
  check_launch("fill");
}

void add(float* y, const float* x, int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  launch(k_add, grid_for(n, 256), 256, 0, s, y, x, n);
  check_launch("add");
}

void rms_norm(const float* x, const float* w, int64_t n, int64_t rows, float eps, float* y, cudaStream_t s, Q8Out q) {
  if (rows <= 0 || n <= 0) return;
  if (rows > 1 && n <= 4096 && !q.qs) {
    launch(k_rms_norm_warps, grid_for(rows, 8), 256, 0, s, x, w, n, rows, eps, y);
  } else {
    launch(k_rms_norm, grid_for(rows, 1), 1024, 0, s, x, w, n, eps, y, q);
  }
  check_launch("rms_norm");
}

void rope_tail(float* x, int64_t rows, int64_t n_heads, int64_t head_dim, const double* freqs, int64_t n_pairs,
               DevPos pos0, int64_t pos_step, bool inverse, cudaStream_t s) {
  if (rows <= 0 || n_pairs <= 0 || n_heads <= 0) return;
  const size_t sh = static_cast<size_t>(2 * n_pairs) * sizeof(float);
  const int64_t parts = std::min<int64_t>(64, (n_heads * n_pairs + 255) / 256);
  const dim3 grid(grid_for(rows, 1), static_cast<unsigned>(parts));
  launch(k_rope_tail, grid, 256, sh, s, x, n_heads, head_dim, freqs, static_cast<int>(n_pairs), pos0, pos_step,
         inverse);
  check_launch("rope_tail");
}

bool rope_tail_q8(float* x, int64_t n_heads, int64_t head_dim, const double* freqs, int64_t n_pairs, DevPos pos0,
                  bool inverse, Q8Out q, cudaStream_t s) {
  const int64_t n = n_heads * head_dim;
  if (!q.qs || n <= 0 || n % 32 != 0 || head_dim % 2 != 0 || n_pairs <= 0 || 2 * n_pairs > head_dim) return false;
  launch(k_rope_tail_q8, grid_for(n / 32, 8), 256, 0, s, x, n, head_dim, freqs, static_cast<int>(n_pairs), pos0,
         inverse, q);
  check_launch("rope_tail (with its Q8_0 copy)");
  return true;
}

void act_round(float* x, int64_t rows, int64_t row_len, int64_t n_round, int kind, cudaStream_t s) {
  if (rows <= 0 || n_round <= 0) return;
  if (n_round > 12288) fail("CUDA act_round: {} values per row exceed the kernel's 12288", n_round);
  const float hscale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(n_round)));
  launch(k_act_round, grid_for(rows, 1), 256, static_cast<size_t>(n_round) * sizeof(float), s, x, row_len,
         static_cast<int>(n_round), kind, hscale);
  check_launch("act_round");
}

bool attn_qkv_prep(float* q, float* kv, int64_t rows, int64_t n_heads, int64_t head_dim, const float* kv_norm,
                   float eps, const double* freqs, int64_t n_pairs, DevPos pos0, int64_t n_round, cudaStream_t s) {
  if (rows <= 0) return true;
  const size_t sh = static_cast<size_t>(kPrepWarps * head_dim) * sizeof(float);
  if (sh > 48 * 1024 || rows > 65535 || n_round > head_dim || 2 * n_pairs > head_dim) return false;
  const dim3 grid(static_cast<unsigned>((n_heads + kPrepWarps - 1) / kPrepWarps + 1), static_cast<unsigned>(rows));
  launch(k_attn_qkv_prep, grid, 32 * kPrepWarps, sh, s, q, kv, n_heads, head_dim, kv_norm, eps, freqs,
         static_cast<int>(n_pairs), pos0, static_cast<int>(n_round));
  check_launch("attn_qkv_prep");
  return true;
}

void swiglu(const float* g, const float* u, int64_t rows, int64_t n, float limit, const float* weights, float* h,
            cudaStream_t s, Q8Out q) {
  if (rows <= 0 || n <= 0) return;
  launch(k_swiglu, grid_for(rows * n, 256), 256, 0, s, g, u, rows, n, limit, weights, h, q);
  check_launch("swiglu");
}

void embed(GgmlType type, const uint8_t* table, int64_t n_in, int64_t n_rows, size_t row_stride,
           const int32_t* tokens, int64_t rows, int copies, float* X, int* err, cudaStream_t s) {
  if (rows <= 0) return;
  launch(k_embed, grid_for(rows, 1), 256, 0, s, static_cast<int>(type), table, n_in, n_rows, row_stride, tokens, copies,
         X, err);
  check_launch("embed");
}

void compressor_store(GgmlType ape_type, const uint8_t* ape, size_t ape_stride, DevPos pos, int64_t ratio,
                      int64_t lanes, const float* kvp, const float* scp, int64_t width, float* kv, float* score,
                      cudaStream_t s) {
  if (width <= 0) return;
  launch(k_compressor_store, grid_for(width, 256), 256, 0, s, static_cast<int>(ape_type), ape, ape_stride, pos, ratio,
         lanes, kvp, scp, width, kv, score);
  check_launch("compressor_store");
}

void compressor_commit(DevPos pos, int64_t ratio, int64_t lanes, int64_t dim, const float* y, float* rows, float* kv,
                       float* score, cudaStream_t s) {
  const int64_t n = dim + (lanes == 2 ? ratio * lanes * dim : 0);
  launch(k_compressor_commit, grid_for(n, 256), 256, 0, s, pos, ratio, lanes, dim, y, rows, kv, score);
  check_launch("compressor_commit");
}

void store_row(float* ring, int64_t ring_rows, int64_t n, DevPos pos, const float* src, cudaStream_t s) {
  if (n <= 0) return;
  launch(k_store_row, grid_for(n, 256), 256, 0, s, ring, ring_rows, n, pos, src);
  check_launch("store_row");
}

void compressor_pool(const float* kv, const float* score, int64_t ratio, int64_t lanes, int64_t dim, float* out,
                     cudaStream_t s) {
  if (dim <= 0) return;
  launch(k_compressor_pool, grid_for(dim, 128), 128, 0, s, kv, score, ratio, lanes, dim, out);
  check_launch("compressor_pool");
}

void compressor_chunk_pool(GgmlType ape_type, const uint8_t* ape, size_t ape_stride, int64_t pos0, int64_t count,
                           int64_t ratio, int64_t lanes, int64_t dim, const float* kvp, const float* scp,
                           const float* kv, const float* score, float* rows, cudaStream_t s) {
  const int64_t n_emit = (pos0 + count) / ratio - pos0 / ratio;
  if (dim <= 0 || n_emit <= 0) return;
  if (n_emit > 65535) fail("CUDA compressor_chunk: {} rows in one chunk exceed the grid", n_emit);
  const int64_t first_end = (pos0 / ratio + 1) * ratio - 1;
  const ChunkSrc src{static_cast<int>(ape_type), ape, ape_stride, pos0, ratio, lanes * dim, kvp, scp};
  launch(k_compressor_chunk_pool, dim3(grid_for(dim, 128), static_cast<unsigned>(n_emit)), 128, 0, s, src, lanes, dim,
         first_end, kv, score, rows);
  check_launch("compressor_chunk pool");
}

void compressor_chunk_state(GgmlType ape_type, const uint8_t* ape, size_t ape_stride, int64_t pos0, int64_t count,
                            int64_t ratio, int64_t lanes, int64_t dim, const float* kvp, const float* scp, float* kv,
                            float* score, cudaStream_t s) {
  if (count <= 0) return;
  const ChunkSrc src{static_cast<int>(ape_type), ape, ape_stride, pos0, ratio, lanes * dim, kvp, scp};
  launch(k_compressor_chunk_state, grid_for(ratio * lanes * dim, 256), 256, 0, s, src, lanes, count, kv, score);
  check_launch("compressor_chunk state");
}

void store_rows(float* ring, int64_t ring_rows, int64_t n, int64_t pos0, int64_t count, const float* src,
                cudaStream_t s) {
  if (n <= 0 || count <= 0) return;
  const int64_t kept = std::min(count, ring_rows);
  if (kept > 65535) fail("CUDA store_rows: {} rows exceed the grid", kept);
  launch(k_store_rows, dim3(grid_for(n, 256), static_cast<unsigned>(kept)), 256, 0, s, ring, ring_rows, n, pos0, count,
         src);
  check_launch("store_rows");
}

}  // namespace ds4::cuda
