#pragma once
// CPU-order dot products for the CUDA GEMV kernels (internal to gemv*.cu).
//
// The CPU's dot products (src/quant) add one float term per weight block into partial sum
// (block % 8) and fold the eight partials as quant/lane_sum.h does (Q8_0, Q2_K, Q4_K), or add
// the terms in one running sum (IQ2_XXS); F32/F16/BF16 rows run 32 FMA chains (element i into
// chain i % 32) folded as the AVX2 kernel does (dot_avx2_float.cpp). Every term is computed
// from integers and the block's scales with the same float operations on both sides, so the
// result is the CPU's bit for bit if the terms are *added* in the CPU's order. These kernels
// split the work so that holds and parallelism survives:
//  1. a block of threads stages the bytes of `rb` weight rows (one segment at a time) into
//     shared memory with coalesced 16-byte loads: many independent loads in flight;
//  2. every thread computes terms of (row, weight block) items, in any order, into shared memory;
//  3. one thread per (row, activation row, CPU partial sum) adds its terms in block order;
//  4. the partials are folded in the CPU's order.
// The float path keeps one warp per row whose lane L owns FMA chain L over the staged row.
#include <cstdint>
#include <type_traits>

#include "compute/cuda/cpu_order.cuh"
#include "compute/cuda/gemv_formats.cuh"

namespace ds4::cuda::gemv_detail {

// True when the CPU dot of F adds block terms into 8 partial sums (else: one running sum).
template <class F>
constexpr bool kEightPartials = !std::is_same_v<F, FmtIQ2_XXS>;

constexpr int kStageBudget = 24 * 1024;  // bytes of staged weights per block of threads
constexpr int kMaxChains = 32;           // rows x activation rows per block (8 partials each)
// Blocks a launch should have at least (2 per SM on a 132-SM H200) before rows per block shrink:
// one-row blocks leave most threads idle in the term phase (measured slower).
constexpr int64_t kTargetBlocks = 264;
// Resident blocks per SM the kernels are compiled for (caps registers at 80 a thread): enough
// warps to overlap one block's staging with another's arithmetic.
constexpr int kMinBlocks = 3;

__host__ __device__ constexpr int round16(int v) { return (v + 15) / 16 * 16; }
// Bytes of shared memory per staged row segment: the segment plus its misalignment and slack.
__host__ __device__ constexpr int slice_bytes_for(int seg_bytes) { return round16(seg_bytes + 16 + kSliceSlack); }

// Copies bytes [off, off+nbytes) of rows 0..nrows-1 (row j at base + j*row_stride) into the
// slices (row j's at smem + j*slice; its first byte at slice + (address mod 16)). All threads
// of the block take part; the caller synchronizes afterwards.
__device__ __forceinline__ void stage_rows(const uint8_t* base, size_t row_stride, int nrows, int64_t off, int nbytes,
                                           uint8_t* smem, int slice) {
  const int nch_max = slice / 16, total = nrows * nch_max;
  constexpr int kBatch = 4;  // chunks per thread whose loads are issued before any store
  // Chunk t: row j = t / nch_max, chunk c; whole (1) / edge (2) / none (0). Addresses are
  // recomputed in the store pass rather than kept (registers).
  auto where = [&](int t, uintptr_t& a, uintptr_t& s, uintptr_t& e) {
    const int j = t / nch_max, c = t - j * nch_max;
    s = reinterpret_cast<uintptr_t>(base + static_cast<size_t>(j) * row_stride + off);
    e = s + static_cast<uintptr_t>(nbytes);
    a = (s & ~static_cast<uintptr_t>(15)) + 16u * static_cast<uintptr_t>(c);
    if (t >= total || a >= e) return 0;
    return (a >= s && a + 16 <= e) ? 1 : 2;
  };
  for (int t0 = 0; t0 < total; t0 += kBatch * static_cast<int>(blockDim.x)) {
    uint4 v[kBatch];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      uintptr_t a, s, e;
      if (where(t0 + u * static_cast<int>(blockDim.x) + static_cast<int>(threadIdx.x), a, s, e) == 1)
        v[u] = __ldg(reinterpret_cast<const uint4*>(a));
    }
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int t = t0 + u * static_cast<int>(blockDim.x) + static_cast<int>(threadIdx.x);
      uintptr_t a, s, e;
      const int kind = where(t, a, s, e);
      if (kind == 0) continue;
      const int j = t / nch_max, c = t - j * nch_max;
      uint8_t* dst = smem + j * slice + 16 * c;
      if (kind == 1) {
        *reinterpret_cast<uint4*>(dst) = v[u];
      } else {
        for (int i = 0; i < 16; ++i)
          if (a + i >= s && a + i < e) dst[i] = __ldg(reinterpret_cast<const unsigned char*>(a + i));
      }
    }
  }
}

__device__ __forceinline__ const uint8_t* staged(const uint8_t* base, size_t row_stride, int j, int64_t off,
                                                 const uint8_t* smem, int slice) {
  const uintptr_t s = reinterpret_cast<uintptr_t>(base + static_cast<size_t>(j) * row_stride + off);
  return smem + j * slice + static_cast<int>(s & 15u);
}

// Shared-memory plan of one quantized launch.
struct QPlan {
  int rb = 1;          // weight rows per block of threads
  int seg_blocks = 0;  // weight blocks per staged segment (a multiple of 8 unless it is the row)
  int slice = 0;       // bytes per staged row
  size_t smem = 0;
};

// res[j*R + r] (shared, r < nr) = the CPU's vec_dot of weight row j (of nrows rows at w) with
// activation row r of aq, before F::kPost. Every thread of the block must call it; it ends
// synchronized. stage: rb*slice bytes; csm: rb*R*seg_blocks floats; res: rb*R floats.
template <class F, int R>
__device__ void cta_qdot(const uint8_t* w, size_t row_stride, int64_t n_in, int nrows, const ActQ& aq, int nr,
                         const QPlan& pl, uint8_t* stage, float* csm, float* res, const uint2* grid) {
  constexpr int kParts = kEightPartials<F> ? 8 : 1;
  const int64_t nb = n_in / F::kBE;
  const int tid = threadIdx.x;
  const int chains = nrows * R * kParts;
  const int cj = tid / (R * kParts), cr = (tid / kParts) % R, cl = tid % kParts;
  float acc = 0.0f;
  for (int64_t b0 = 0; b0 < nb; b0 += pl.seg_blocks) {
    const int nbs = static_cast<int>(nb - b0 < pl.seg_blocks ? nb - b0 : pl.seg_blocks);
    stage_rows(w, row_stride, nrows, b0 * F::kBB, nbs * F::kBB, stage, pl.slice);
    __syncthreads();
    for (int it = tid; it < nrows * nbs; it += blockDim.x) {
      const int j = it / nbs, bl = it - j * nbs;
      const uint8_t* p = staged(w, row_stride, j, b0 * F::kBB, stage, pl.slice) + bl * F::kBB;
      float c[R];
#pragma unroll
      for (int r = 0; r < R; ++r) c[r] = 0.0f;
      F::template dot<R>(p, b0 + bl, aq, nr, c, grid);
#pragma unroll
      for (int r = 0; r < R; ++r) csm[(j * R + r) * pl.seg_blocks + bl] = c[r];
    }
    __syncthreads();
    if (tid < chains && cr < nr) {
      const float* cc = csm + (cj * R + cr) * pl.seg_blocks;
      if constexpr (kParts == 8) {
        for (int bl = static_cast<int>((cl - b0 % 8 + 8) % 8); bl < nbs; bl += 8) acc = __fadd_rn(acc, cc[bl]);
      } else {
        for (int bl = 0; bl < nbs; ++bl) acc = __fadd_rn(acc, cc[bl]);
      }
    }
    __syncthreads();
  }
  if constexpr (kParts == 8) {
    if (tid < chains) csm[tid] = acc;
    __syncthreads();
    if (tid < chains && cl == 0 && cr < nr) res[cj * R + cr] = fold8(csm + tid);
  } else {
    if (tid < chains && cr < nr) res[cj * R + cr] = acc;
  }
  __syncthreads();
}

// Shared-memory plan of one float-weight launch.
struct FPlan {
  int rb = 1;         // weight rows per block (one warp each)
  int seg_elems = 0;  // elements per staged segment (a multiple of 32)
  int slice = 0;
  size_t smem = 0;
};

// res[j*R + r] = the CPU's AVX2 f32 dot (dot_avx2_float.cpp) of float row j with x row r
// (x + r*x_stride); warp j computes row j. Every thread must call it; it ends synchronized.
template <class F, int R>
__device__ void cta_fdot(const uint8_t* w, size_t row_stride, int64_t n_in, int nrows, const float* x,
                         int64_t x_stride, int nr, const FPlan& pl, uint8_t* stage, float* res) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t n32 = n_in / 32 * 32;
  float a[R];
#pragma unroll
  for (int r = 0; r < R; ++r) a[r] = 0.0f;
  for (int64_t e0 = 0; e0 < n_in; e0 += pl.seg_elems) {
    const int ne = static_cast<int>(n_in - e0 < pl.seg_elems ? n_in - e0 : pl.seg_elems);
    stage_rows(w, row_stride, nrows, e0 * F::kES, ne * F::kES, stage, pl.slice);
    // The activation rows' segment too: the chains then wait on shared memory only. 16-byte
    // loads when the rows allow them (backend buffers are 256-byte aligned).
    float* xs = reinterpret_cast<float*>(stage + pl.rb * pl.slice);
    const bool vec4 = (reinterpret_cast<uintptr_t>(x + e0) % 16 == 0) && x_stride % 4 == 0 && ne % 4 == 0 &&
                      pl.seg_elems % 4 == 0;
    if (vec4) {
      const int nq = ne / 4;  // float4s per row
      for (int i0 = threadIdx.x; i0 < nr * nq; i0 += 4 * blockDim.x) {
        float4 v[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) {
          const int i = i0 + u * blockDim.x, r = i / nq, j = i - r * nq;
          if (i < nr * nq) v[u] = __ldg(reinterpret_cast<const float4*>(x + r * x_stride + e0) + j);
        }
#pragma unroll
        for (int u = 0; u < 4; ++u) {
          const int i = i0 + u * blockDim.x, r = i / nq, j = i - r * nq;
          if (i < nr * nq) reinterpret_cast<float4*>(xs + r * pl.seg_elems)[j] = v[u];
        }
      }
    } else {
      for (int i = threadIdx.x; i < nr * ne; i += blockDim.x) {
        const int r = i / ne, j = i - r * ne;
        xs[r * pl.seg_elems + j] = __ldg(x + r * x_stride + e0 + j);
      }
    }
    __syncthreads();
    if (warp < nrows) {
      const uint8_t* row = staged(w, row_stride, warp, e0 * F::kES, stage, pl.slice);
      int i = 0;
      // Eight steps' loads in flight before their FMAs (the chains stay in element order).
      for (; i + 256 <= ne; i += 256) {
        float wv[8], xv[8][R];
#pragma unroll
        for (int u = 0; u < 8; ++u) {
          wv[u] = F::selem(row, i + 32 * u + lane);
#pragma unroll
          for (int r = 0; r < R; ++r) xv[u][r] = r < nr ? xs[r * pl.seg_elems + i + 32 * u + lane] : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < 8; ++u)
#pragma unroll
          for (int r = 0; r < R; ++r)
            if (r < nr) a[r] = fmaf(wv[u], xv[u][r], a[r]);
      }
      for (; i + 32 <= ne; i += 32) {
        const float wv = F::selem(row, i + lane);
#pragma unroll
        for (int r = 0; r < R; ++r)
          if (r < nr) a[r] = fmaf(wv, xs[r * pl.seg_elems + i + lane], a[r]);
      }
      if (e0 + i == n32) {  // the last segment: 8-element steps into chains 0..7, then the tail
        for (; i + 8 <= ne; i += 8)
          if (lane < 8) {
            const float wv = F::selem(row, i + lane);
#pragma unroll
            for (int r = 0; r < R; ++r)
              if (r < nr) a[r] = fmaf(wv, xs[r * pl.seg_elems + i + lane], a[r]);
          }
        const int t0 = i;
#pragma unroll
        for (int r = 0; r < R; ++r) {
          float sum = warp_fold_chains(a[r]);
          if (lane == 0 && r < nr) {
            for (int t = t0; t < ne; ++t)
              sum = __fadd_rn(sum, __fmul_rn(F::selem(row, t), xs[r * pl.seg_elems + t]));
            res[warp * R + r] = sum;
          }
        }
      }
    }
    __syncthreads();
  }
}

// ---- plans (host) --------------------------------------------------------------------------

// rb: as many rows as fit kStageBudget (at most kMaxChains / R), halved while the launch would
// have fewer than ~2 blocks per SM; `divides`: rb must divide it (grouped rows), 0 = any.
// `copies`: independent launches' worth of the same shape in one grid (MoE pairs), which count
// towards filling the GPU.
template <class F, int R>
inline QPlan plan_q(int64_t n_in, int64_t n_out, int64_t divides, int64_t copies = 1) {
  QPlan p;
  const int64_t nb = n_in / F::kBE;
  const int64_t row_bytes = nb * F::kBB;
  int64_t rb = kStageBudget / (row_bytes > 0 ? row_bytes : 1);
  rb = rb < 1 ? 1 : rb;
  rb = rb > kMaxChains / R ? kMaxChains / R : rb;
  while (rb > 1 && (n_out + rb - 1) / rb * copies < kTargetBlocks) rb /= 2;
  while (rb > 1 && divides > 0 && divides % rb != 0) --rb;
  p.rb = static_cast<int>(rb);
  if (rb * row_bytes <= kStageBudget) {
    p.seg_blocks = static_cast<int>(nb);
  } else {
    const int64_t s = kStageBudget / F::kBB / 8 * 8;
    p.seg_blocks = static_cast<int>(s < 8 ? 8 : s);
  }
  auto size = [&] {
    p.slice = slice_bytes_for(p.seg_blocks * F::kBB);
    const int csm = p.rb * R * (p.seg_blocks > 8 ? p.seg_blocks : 8);
    p.smem = static_cast<size_t>(grid_smem_bytes<F>()) + static_cast<size_t>(p.rb) * p.slice +
             static_cast<size_t>(csm) * 4 + static_cast<size_t>(p.rb * R) * 4;
  };
  size();
  // Many activation rows make the term array large: shorter segments, then fewer rows.
  while (p.smem > 46 * 1024) {
    if (p.seg_blocks > 8) {
      p.seg_blocks = p.seg_blocks / 2 / 8 * 8 < 8 ? 8 : p.seg_blocks / 2 / 8 * 8;
    } else if (p.rb > 1) {
      p.rb /= 2;
    } else {
      break;
    }
    size();
  }
  return p;
}

constexpr int64_t kFloatSmem = 96 * 1024;  // dynamic shared memory of a float-weight block (opt-in)

template <class F, int R>
inline FPlan plan_f(int64_t n_in, int64_t n_out, int64_t divides, int64_t copies = 1) {
  FPlan p;
  const int64_t row_bytes = n_in * F::kES;
  int64_t rb = kStageBudget / (row_bytes > 0 ? row_bytes : 1);
  rb = rb < 1 ? 1 : rb > kWarps ? kWarps : rb;
  while (rb > 1 && (n_out + rb - 1) / rb * copies < kTargetBlocks) rb /= 2;
  while (rb > 1 && divides > 0 && divides % rb != 0) --rb;
  p.rb = static_cast<int>(rb);
  // Weights (rb rows) and activations (R rows of f32) of one segment in kFloatSmem bytes.
  const int64_t per_elem = rb * F::kES + static_cast<int64_t>(R) * 4;
  int64_t seg = (n_in * per_elem + 64 * rb <= kFloatSmem) ? n_in : (kFloatSmem - 64 * rb) / per_elem / 32 * 32;
  p.seg_elems = static_cast<int>(seg < 32 ? 32 : seg);
  p.slice = slice_bytes_for(p.seg_elems * F::kES);
  p.smem = static_cast<size_t>(p.rb) * p.slice + static_cast<size_t>(R) * p.seg_elems * 4 +
           static_cast<size_t>(p.rb) * 16 * 4;
  return p;
}

}  // namespace ds4::cuda::gemv_detail
