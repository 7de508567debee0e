// Tensor-core Q8_0 matmul for many activation rows (gemm_mma.h). Per call:
//  1. the weight rows are repacked (a slab of at most kSlabBytes at a time) into the permuted,
//     aligned layout of gemm_mma.cuh: int8 quants in 32-byte blocks, f32 scales apart;
//  2. the quantized activations (quantize_acts: the CPU's bytes) likewise, rows padded to tiles;
//  3. one kernel: a block of 16 warps owns 128 weight rows x 64 activation rows (a warp 32 x
//     16: 128 registers; 8 warps of 32 x 32 needed 255 and ran at half the speed on the H200);
//     a 3-stage cp.async pipeline stages 4 blocks (128 values) of both at a time; each warp runs
//     mma.sync m16n8k32 s8 per 32-value block (its exact integer sum) and adds the CPU's float
//     term into the register slot of the block's partial sum (gemm_mma.cuh: bit-identical to
//     quant::vec_dot).
// Repacking every call costs one read and write of the weights (small next to the product for
// the row counts this path takes); a cache of repacked weights would remove it.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "compute/cuda/cuda_async.cuh"
#include "compute/cuda/cuda_launch.h"
#include "compute/cuda/cuda_ops.h"
#include "compute/cuda/cuda_util.cuh"
#include "compute/cuda/gemm_mma.cuh"
#include "compute/cuda/gemm_mma.h"
#include "compute/cuda/gemv_internal.h"
#include "core/error.h"

namespace ds4::cuda::gemv_detail {
namespace {

using namespace ds4::cuda::mma;  // (kThreads is written mma::kThreads: gemv_detail has its own)

constexpr size_t kSlabBytes = size_t{64} << 20;  // repacked weight bytes per slab

size_t round256(size_t v) { return (v + 255) / 256 * 256; }

// d = A * B + 0x4B400000 (gemm_mma.cuh: the s32 results read as f32 are 1.5 * 2^23 + isum).
__device__ __forceinline__ void mma_s8(int d[4], const uint32_t a[4], const uint32_t b[2]) {
  asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%10,%10,%10,%10};\n"
      : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(kBiasBits));
}

// Weight rows [first, first + n_pad) of w (rows >= n_valid are padding) into wq / wd.
__global__ void k_repack_w(const uint8_t* w, size_t row_stride, int64_t first, int64_t n_valid, int64_t n_pad,
                           KLayout L, int8_t* wq, float* wd) {
  pdl_begin();
  const int64_t it = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (it >= n_pad * L.KP) return;
  const int64_t o = it / L.KP;
  const int x = static_cast<int>(it - o * L.KP);
  const int q = item_pos(L, x);
  const uint8_t* src = o < n_valid ? w + static_cast<size_t>(first + o) * row_stride : nullptr;
  repack_weight_block(src, L, q, reinterpret_cast<uint8_t*>(wq + (o * L.KP + q) * 32), wd + o * L.KP + q);
}

// Activation rows [0, rows_pad) x groups (rows >= rows are padding) into aq / ad.
__global__ void k_repack_a(ActQ a, int64_t rows, int64_t rows_pad, int64_t groups, int64_t n_in, KLayout L, int8_t* aq,
                           float* ad) {
  pdl_begin();
  const int64_t it = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (it >= rows_pad * groups * L.KP) return;
  const int64_t rg = it / L.KP;  // row * groups + group
  const int x = static_cast<int>(it - rg * L.KP);
  const int64_t r = rg / groups, g = rg - r * groups;
  const int q = item_pos(L, x);
  const int8_t* qs = nullptr;
  const float* d = nullptr;
  if (r < rows) {
    qs = a.qs + r * a.n + g * n_in;
    d = a.d + (r * a.n + g * n_in) / 32;
  }
  repack_act_block(qs, d, L, q, reinterpret_cast<uint8_t*>(aq + (rg * L.KP + q) * 32), ad + rg * L.KP + q);
}

struct GemmArgs {
  const int8_t* wq;
  const float* wd;
  const int8_t* aq;
  const float* ad;
  int64_t a_pitch;  // permuted blocks per activation row (groups * KP)
  int KP, C;
  int64_t n_valid;     // weight rows of this slab
  int64_t rows;        // activation rows
  int64_t group_rows;  // 0: one group
  int64_t o_base;      // the slab's first output row
  float* y;
  int64_t y_stride;
};

__device__ __forceinline__ void issue_stage(const TileSrc& T, int q0, uint32_t st) {
  for (int i = threadIdx.x; i < kPieces; i += mma::kThreads) {
    int dst = 0;
    const void* src = stage_piece(T, q0, i, &dst);
    cp_async16(st + static_cast<uint32_t>(dst), src);
  }
}

// kOneSlot: every term into slot 0 (not the CPU's order: the same block terms in one running
// sum; cuda_mma_check times it and bounds its difference). Not used by the backend: on the H100
// the CPU's 4 slots cost only 1-4% at 2,048 rows, and a product upstream of a router must keep
// the CPU's values (a near tie would route differently).
template <int S, bool kOneSlot>
__device__ __forceinline__ void run_segment(Acc& acc, const TileSrc& T, uint8_t* smem, uint32_t smem_u32, int& ci,
                                            int nchunks, int cps, int lane, int warp) {
  constexpr int kSlot = kOneSlot ? 0 : seg_slot(S);
  if (!kOneSlot || S == 0) begin_segment<kOneSlot ? 0 : S>(acc);
  for (int c = 0; c < cps; ++c, ++ci) {
    cp_async_wait<kStages - 2>();  // chunk ci has landed (this thread's copies) ...
    __syncthreads();               // ... everyone's, and everyone is done with chunk ci - 1's stage
    const int nx = ci + kStages - 1;
    if (nx < nchunks) issue_stage(T, nx * kKB, smem_u32 + static_cast<uint32_t>((nx % kStages) * kStageBytes));
    cp_async_commit();  // (empty groups at the end keep the count uniform)
    const uint8_t* st = smem + (ci % kStages) * kStageBytes;
#pragma unroll
    for (int kb = 0; kb < kKB; ++kb) {
      Frags f;
      load_frags(st, lane, warp, kb, f);
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) {
          int d[4];
          mma_s8(d, f.a[mt], f.b[nt]);
          epilogue<kSlot>(acc, f, mt, nt, d);
        }
    }
  }
  if constexpr (!kOneSlot) end_segment<S>(acc);
}

// Block (kBM weight rows) x (kBN activation rows) = blockIdx.x, blockIdx.y.
template <bool kOneSlot>
__global__ void __launch_bounds__(mma::kThreads, 1) k_mma_q8_0(GemmArgs g) {
  pdl_begin();
  extern __shared__ uint4 smem4[];
  uint8_t* smem = reinterpret_cast<uint8_t*>(smem4);
  const uint32_t smem_u32 = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  TileSrc T;
  T.wq = g.wq, T.wd = g.wd, T.aq = g.aq, T.ad = g.ad;
  T.o0 = static_cast<int64_t>(blockIdx.x) * kBM;
  T.t0 = static_cast<int64_t>(blockIdx.y) * kBN;
  T.a_pitch = g.a_pitch;
  T.acol = g.group_rows > 0 ? (g.o_base + T.o0) / g.group_rows * g.KP : 0;
  T.KP = g.KP;
  const int cps = g.C / kKB, nchunks = 8 * cps;
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < nchunks) issue_stage(T, s * kKB, smem_u32 + static_cast<uint32_t>(s * kStageBytes));
    cp_async_commit();
  }
  Acc acc;
  int ci = 0;
  run_segment<0, kOneSlot>(acc, T, smem, smem_u32, ci, nchunks, cps, lane, warp);
  run_segment<1, kOneSlot>(acc, T, smem, smem_u32, ci, nchunks, cps, lane, warp);
  run_segment<2, kOneSlot>(acc, T, smem, smem_u32, ci, nchunks, cps, lane, warp);
  run_segment<3, kOneSlot>(acc, T, smem, smem_u32, ci, nchunks, cps, lane, warp);
  run_segment<4, kOneSlot>(acc, T, smem, smem_u32, ci, nchunks, cps, lane, warp);
  run_segment<5, kOneSlot>(acc, T, smem, smem_u32, ci, nchunks, cps, lane, warp);
  run_segment<6, kOneSlot>(acc, T, smem, smem_u32, ci, nchunks, cps, lane, warp);
  run_segment<7, kOneSlot>(acc, T, smem, smem_u32, ci, nchunks, cps, lane, warp);
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int64_t o = T.o0 + elem_row(lane, warp, mt, i), t = T.t0 + elem_col(lane, warp, nt, i);
        if (o < g.n_valid && t < g.rows) g.y[t * g.y_stride + g.o_base + o] = acc.v[0][mt][nt][i];
      }
}

}  // namespace

namespace {
void mma_q8_0(const DevMatrix& w, const ActQ& aq, int64_t rows, int64_t group_rows, float* y, int64_t y_stride,
              bool one_slot, cudaStream_t stream);
}

bool mma_enabled() {
  // On by default since checked and measured on the H200 (bit-exact, prefill 1.8x on 8 layers);
  // DS4_CUDA_MMA=0 for A/B.
  static const bool on = env_switch("DS4_CUDA_MMA", true);
  return on;
}

bool mma_supports(const DevMatrix& w, int64_t rows, int64_t group_rows) {
  if (w.type != GgmlType::Q8_0 || rows < kMmaMinRows) return false;
  if (group_rows > 0 && group_rows % kBM != 0) return false;
  return w.n_in % 32 == 0 && w.n_in <= (int64_t{1} << 24);
}

bool mma_applies(const DevMatrix& w, int64_t rows, int64_t group_rows) {
  return mma_enabled() && mma_supports(w, rows, group_rows);
}

void mma_matmul(const DevMatrix& w, int64_t groups, const float* x, int64_t rows, float* y, int64_t x_stride,
                int64_t y_stride, cudaStream_t stream, bool one_slot) {
  check_matrix(w, "mma matmul");
  if (rows < 0) fail("CUDA mma matmul: negative row count {}", rows);
  if (groups < 1 || w.n_out % groups != 0)
    fail("CUDA mma matmul: {} rows do not split into {} groups", w.n_out, groups);
  const int64_t group_rows = groups > 1 ? w.n_out / groups : 0;
  if (!mma_supports(w, rows, group_rows))
    fail("CUDA mma matmul: {} x {} {} weights, {} rows, {} groups: not supported", w.n_out, w.n_in,
         w.type == GgmlType::Q8_0 ? "q8_0" : "non-q8_0", rows, groups);
  if (!x || !y) fail("CUDA mma matmul: null activation or output pointer");
  const int64_t x_len = groups * w.n_in;
  if (x_stride == 0) x_stride = x_len;
  if (y_stride == 0) y_stride = w.n_out;
  if (x_stride < x_len || y_stride < w.n_out) fail("CUDA mma matmul: strides {} / {} too short", x_stride, y_stride);
  Scratch buf(act_bytes(GgmlType::Q8_0, rows, x_len), stream);
  const ActQ aq = quantize_acts(GgmlType::Q8_0, x, rows, x_len, x_stride, buf.get(), stream);
  mma_q8_0(w, aq, rows, group_rows, y, y_stride, one_slot, stream);
}

void mma_matmul_q8_0(const DevMatrix& w, const ActQ& aq, int64_t rows, int64_t group_rows, float* y, int64_t y_stride,
                     cudaStream_t stream) {
  mma_q8_0(w, aq, rows, group_rows, y, y_stride, false, stream);
}

namespace {
void mma_q8_0(const DevMatrix& w, const ActQ& aq, int64_t rows, int64_t group_rows, float* y, int64_t y_stride,
              bool one_slot, cudaStream_t stream) {
  if (w.type != GgmlType::Q8_0) fail("CUDA mma matmul: weights are not q8_0");
  const KLayout L = k_layout(w.n_in);
  const int64_t groups = aq.n / w.n_in;
  if (groups < 1 || groups * w.n_in != aq.n) fail("CUDA mma matmul: activation row of {} for rows of {}", aq.n, w.n_in);
  if (rows <= 0 || w.n_out <= 0) return;
  static bool smem_ok = [] {
    allow_smem(reinterpret_cast<const void*>(k_mma_q8_0<false>), kSmemBytes, "mma matmul");
    allow_smem(reinterpret_cast<const void*>(k_mma_q8_0<true>), kSmemBytes, "mma matmul (one slot)");
    return true;
  }();
  (void)smem_ok;

  // Activations, once for every slab.
  const int64_t rows_pad = (rows + kBN - 1) / kBN * kBN;
  if (rows_pad / kBN > 65535) fail("CUDA mma matmul: {} activation rows is too many", rows);
  const int64_t a_pitch = groups * L.KP;
  const size_t aq_bytes = round256(static_cast<size_t>(rows_pad * a_pitch) * 32);
  const size_t ad_bytes = round256(static_cast<size_t>(rows_pad * a_pitch) * 4);
  Scratch abuf(aq_bytes + ad_bytes, stream);
  int8_t* paq = static_cast<int8_t*>(abuf.get());
  float* pad = reinterpret_cast<float*>(static_cast<uint8_t*>(abuf.get()) + aq_bytes);
  launch(k_repack_a, grid_for(rows_pad * a_pitch, 256), 256, 0, stream, aq, rows, rows_pad, groups, w.n_in, L, paq,
         pad);
  check_launch("mma repack (activations)");

  // Weights, one slab of whole tiles at a time.
  const int64_t row_bytes = static_cast<int64_t>(L.KP) * 36;
  int64_t slab = static_cast<int64_t>(kSlabBytes) / row_bytes / kBM * kBM;
  if (slab < kBM) slab = kBM;
  const int64_t n_pad_all = (w.n_out + kBM - 1) / kBM * kBM;
  if (slab > n_pad_all) slab = n_pad_all;
  const size_t wq_bytes = round256(static_cast<size_t>(slab * L.KP) * 32);
  const size_t wd_bytes = round256(static_cast<size_t>(slab * L.KP) * 4);
  Scratch wbuf(wq_bytes + wd_bytes, stream);
  int8_t* pwq = static_cast<int8_t*>(wbuf.get());
  float* pwd = reinterpret_cast<float*>(static_cast<uint8_t*>(wbuf.get()) + wq_bytes);
  for (int64_t o0 = 0; o0 < w.n_out; o0 += slab) {
    const int64_t n_valid = w.n_out - o0 < slab ? w.n_out - o0 : slab;
    const int64_t n_pad = (n_valid + kBM - 1) / kBM * kBM;
    launch(k_repack_w, grid_for(n_pad * L.KP, 256), 256, 0, stream, w.data, w.row_stride, o0, n_valid, n_pad, L, pwq,
           pwd);
    check_launch("mma repack (weights)");
    GemmArgs g;
    g.wq = pwq, g.wd = pwd, g.aq = paq, g.ad = pad;
    g.a_pitch = a_pitch, g.KP = L.KP, g.C = L.C;
    g.n_valid = n_valid, g.rows = rows, g.group_rows = group_rows, g.o_base = o0;
    g.y = y, g.y_stride = y_stride;
    const dim3 grid(static_cast<unsigned>(n_pad / kBM), static_cast<unsigned>(rows_pad / kBN));
    launch(one_slot ? k_mma_q8_0<true> : k_mma_q8_0<false>, grid, mma::kThreads, kSmemBytes, stream, g);
    check_launch("mma matmul (q8_0, tensor cores)");
  }
}
}  // namespace

}  // namespace ds4::cuda::gemv_detail
