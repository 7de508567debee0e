#include "convert/row_encode.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <thread>

#include "core/error.h"
#include "core/fp16.h"
#include "quant/quant.h"

namespace ds4::convert {

std::vector<uint8_t> encode_rows(GgmlType type, const float* src, int64_t nrows, int64_t n, const char* what,
                                 int threads) {
  const auto& tr = traits(type);
  if (n % tr.block_elems != 0) fail("{}: row of {} values is not a whole number of {} blocks", what, n, tr.name);
  for (int64_t i = 0; i < nrows * n; ++i)
    if (!std::isfinite(src[i])) fail("{}: value {} (row {}, column {}) is {}", what, i, i / n, i % n, src[i]);
  const size_t rb = row_bytes(tr, static_cast<uint64_t>(n));
  std::vector<uint8_t> out(rb * static_cast<size_t>(nrows));
  if (type == GgmlType::F32) {
    std::memcpy(out.data(), src, out.size());
    return out;
  }
  if (type == GgmlType::F16) {
    for (int64_t i = 0; i < nrows * n; ++i) {
      uint16_t h = fp32_to_fp16(src[i]);
      std::memcpy(out.data() + 2 * i, &h, 2);
    }
    return out;
  }
  // Quantized: rows are independent, so chunks of rows run in parallel.
  int nt = threads > 0 ? threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  nt = static_cast<int>(std::min<int64_t>(nt, std::max<int64_t>(1, nrows)));
  // ggml refuses IQ2_XXS without importance weights. With no calibration data, all-ones
  // weights make its search minimize the plain magnitude-weighted error sqrt(sigma^2 + x^2).
  std::vector<float> ones;
  if (type == GgmlType::IQ2_XXS) ones.assign(static_cast<size_t>(n), 1.0f);
  const float* imatrix = ones.empty() ? nullptr : ones.data();
  std::vector<std::thread> pool;
  std::vector<std::exception_ptr> errors(nt);
  const int64_t per = (nrows + nt - 1) / nt;
  for (int t = 0; t < nt; ++t) {
    const int64_t r0 = t * per, r1 = std::min(nrows, r0 + per);
    if (r0 >= r1) continue;
    pool.emplace_back([&, t, r0, r1] {
      try {
        quant::quantize_rows(type, src + r0 * n, out.data() + r0 * rb, r1 - r0, n, imatrix);
      } catch (...) {
        errors[t] = std::current_exception();
      }
    });
  }
  for (auto& th : pool) th.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  return out;
}

}  // namespace ds4::convert
