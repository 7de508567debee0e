#pragma once
// The official DeepSeek V4 release's quantized weights (shared/design/deepseek-v4-model.md
// §3.4): most linears FP8 E4M3 [out, in] with one E8M0 scale per 128x128 block
// ("<name>.scale", [ceil(out/128), ceil(in/128)]; any square power-of-two block edge is
// accepted and read off the scale's shape); routed experts FP4 E2M1 packed two per byte
// (low nibble = even element) as I8/U8 [out, in/2] with one E8M0 scale per 32 inputs
// ([out, in/32]). E8M0 byte e means 2^(e-127); 255 is NaN and refused. Scales stored as F32
// (older FP8 releases' weight_scale_inv) are read as the factor itself.
#include <cstdint>

#include "convert/safetensors.h"

namespace ds4::convert {

float e4m3_to_f32(uint8_t code);    // sign, 4-bit exponent (bias 7), 3-bit mantissa; 0x7F/0xFF NaN
float e2m1_to_f32(uint8_t nibble);  // {0, .5, 1, 1.5, 2, 3, 4, 6} with sign bit 3

// True when `weight` is stored as FP8 (F8_E4M3) or FP4 (I8/U8 packed) and needs a scale.
bool is_fp8(const StTensor& weight);
bool is_fp4(const StTensor& weight);

// Throws unless scale has the dtype and shape the weight's format needs; out/in are the
// logical [out, in] of the weight.
void check_fp8_scale(const StTensor& weight, const StTensor& scale, uint64_t out, uint64_t in);
void check_fp4_scale(const StTensor& weight, const StTensor& scale, uint64_t out, uint64_t in);

// Rows [row0, row0 + nrows) of the logical [out, in] matrix as floats (exact: a code times a
// power of two). A non-finite result (NaN code, NaN scale, overflow) is an error naming the
// tensor, row and column.
void decode_fp8_rows(const StTensor& weight, const StTensor& scale, uint64_t in, uint64_t row0, uint64_t nrows, float* dst);
void decode_fp4_rows(const StTensor& weight, const StTensor& scale, uint64_t in, uint64_t row0, uint64_t nrows, float* dst);

// The same rows as ggml MXFP4 blocks (17 bytes per 32 inputs), bit for bit: the E8M0 byte is
// ggml's exponent byte unchanged (ggml scales its doubled E2M1 table by 2^(e-128)) and the
// nibbles keep their codes, moved from pair order (2k, 2k+1) to ggml's (j, j+16) order.
void repack_fp4_rows_mxfp4(const StTensor& weight, const StTensor& scale, uint64_t in, uint64_t row0, uint64_t nrows,
                           uint8_t* dst);

}  // namespace ds4::convert
