#pragma once
// Internal to the CUDA backend: quantized matrix-vector / small-batch matrix products and the
// routed-expert MoE kernels. All pointers are device pointers; work is queued on `stream`.
//
// Numerics match the CPU backend (compute/cpu): for a quantized weight type each activation row
// is first quantized to quant::vec_dot_type(type) (Q8_0 or Q8_K) with exactly the bytes
// quant::quantize_activation_row produces, then every (weight block, activation block) pair is
// multiplied in integers as quant::vec_dot does; only the float accumulation order differs.
// F32/F16/BF16 weights multiply the f32 activations. With float_acts, quantized weights are
// decoded (bit-exact with quant::dequantize_row) and multiplied with the f32 activations.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "quant/types.h"

namespace ds4::cuda {

struct DevMatrix {
  GgmlType type = GgmlType::F32;
  const uint8_t* data = nullptr;  // device
  int64_t n_in = 0, n_out = 0;
  size_t row_stride = 0;  // bytes
  // Q8_0 only, optional (the CUDA backend's DS4_CUDA_Q8_SPLIT=1): a device copy of the rows in
  // the split layout of q8_0_split_rows, which the one-row products read with 16-byte loads.
  const uint8_t* q8_split = nullptr;
};

struct DevExperts {
  DevMatrix first;  // expert 0
  int64_t n_expert = 0;
  size_t expert_stride = 0;  // bytes
};

// A one-row activation's Q8_0 quantization already on the device (qs: n bytes, d: n/32 floats,
// as quantize_acts lays them out): a one-row product with Q8_0 activations uses it instead of
// quantizing x again (the CUDA backend's DS4_CUDA_FUSE_QUANT; the caller vouches that it is x's).
struct PreQ8 {
  const int8_t* qs = nullptr;
  const float* d = nullptr;
  int64_t n = 0;
};

// The same for Q8_K (qs: n bytes, d: n/256 floats, bs: n/16 group sums), the routed experts'
// activation format: written by the fused router (matmul_route) for the MoE op that follows.
struct PreQ8K {
  int8_t* qs = nullptr;
  float* d = nullptr;
  int16_t* bs = nullptr;
  int64_t n = 0;
};

// Q8_0 rows in the split layout: row o at dst + o * (nb * 34), its nb blocks' 32 quants first
// (block b at 32 * b, 16-byte aligned when nb % 8 == 0), then their nb f16 scales. Same bytes,
// same size; the file's layout (a 2-byte scale before each block's quants) stays in `w.data`.
// q8_0_splittable: the layout's alignment holds for w (nb a multiple of 8).
bool q8_0_splittable(const DevMatrix& w);
void q8_0_split_rows(const DevMatrix& w, uint8_t* dst, cudaStream_t stream);

// True when matmul/moe_experts handle this weight type.
bool gemv_supports(GgmlType type);

// y[r*y_stride + o] = sum_i W[o][i] x[r*x_stride + i] for r < rows (strides in floats).
// Temporary buffers come from the stream-ordered allocator (cudaMallocAsync).
// Throws ds4::Error naming the kernel on a launch failure.
void matmul(const DevMatrix& w, const float* x, int64_t rows, float* y, int64_t x_stride, int64_t y_stride,
            bool float_acts, cudaStream_t stream, const PreQ8* pre = nullptr);

// ys[i] = ws[i] . x (dense strides) for i < count, all ws of one n_in: one activation
// quantization per format and, for one-row Q8_0 products, one launch for all of them.
void matmul_many(const DevMatrix* ws, int count, const float* x, int64_t rows, float* const* ys, bool float_acts,
                 cudaStream_t stream, const PreQ8* pre = nullptr);

// The router of one token (router.cu): logits = w . x (one row; F32/F16/BF16 weights,
// w.n_out == ra.n_expert <= kRouteMaxExperts) and the token's routing (cuda_ops.h moe_route, row
// 0 of ra's tokens/experts/weights) in one launch: the block that finishes last routes. False,
// launching nothing, when the weights' type or the shape is not one it takes. The counter it
// uses is one per process: launches on one stream only (the backend's).
// With xq (its n == w.n_in, a multiple of 256), the launch also writes x's Q8_K quantization there.
struct RouteArgs;
bool matmul_route(const DevMatrix& w, const float* x, float* logits, const RouteArgs& ra, cudaStream_t s,
                  const PreQ8K* xq = nullptr);

// Grouped rows: W's n_out rows split into `groups` equal groups; output row o of group g reads
// elements [g*n_in, (g+1)*n_in) of the activation row (groups*n_in long), i.e. group g's
// slice (compute::Backend::matmul_grouped). groups = 1 is matmul.
void matmul_grouped(const DevMatrix& w, int64_t groups, const float* x, int64_t rows, float* y, int64_t x_stride,
                    int64_t y_stride, bool float_acts, cudaStream_t stream, const PreQ8* pre = nullptr);

// Routed experts (compute::Backend::moe_experts): for each token t < rows and slot i < k,
// e = experts[t*k+i], h = silu(min(g,limit)) * clamp(u,-limit,limit) * weights[t*k+i] with
// g = gate_e . x[t], u = up_e . x[t] (limit <= 0: no clamp); out = down_e . h; y[t] = sum over
// i in slot order (y overwritten; x, y: rows x gate.n_in). Expert ids are read on the device.
// xq (optional, one row): x's Q8_K quantization already on the device (the caller vouches that
// it is x's); the one-token warp kernels use it instead of quantizing x again.
void moe_experts(const DevExperts& gate, const DevExperts& up, const DevExperts& down, const float* x,
                 const int32_t* experts, const float* weights, int64_t rows, int64_t k, float limit, float* y,
                 bool float_acts, cudaStream_t stream, const PreQ8K* xq = nullptr);

}  // namespace ds4::cuda
