#pragma once
// Float rows -> GGUF tensor bytes of a given type, split over threads for the slow encoders.
#include <cstdint>
#include <vector>

#include "quant/types.h"

namespace ds4::convert {

// nrows rows of n floats each. F32 is copied, F16 rounded to nearest even, quantized types
// go through ds4::quant::quantize_rows (bit-exact with ggml; IQ2_XXS with an all-ones
// importance matrix, since ggml requires one and a checkpoint carries none).
// Throws naming `what` on a non-finite input value.
std::vector<uint8_t> encode_rows(GgmlType type, const float* src, int64_t nrows, int64_t n, const char* what,
                                 int threads = 0);

}  // namespace ds4::convert
