#include "convert/fp8_fp4.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <string>

#include "core/error.h"

namespace ds4::convert {

namespace {

constexpr uint64_t kFp4Group = 32;

// The square block edge b (a power of two) with scale shape [ceil(out/b), ceil(in/b)]: 128 in
// DeepSeek V4. Where several b fit, every fitting b puts all rows (or all columns) into one
// block along that axis, so they decode alike; the smallest is returned. 0 when none fits.
uint64_t fp8_block(const StTensor& s, uint64_t out, uint64_t in) {
  if (s.shape.size() != 2) return 0;
  for (uint64_t b = 1; b <= (uint64_t{1} << 20); b *= 2)
    if ((out + b - 1) / b == s.shape[0] && (in + b - 1) / b == s.shape[1]) return b;
  return 0;
}

std::string shape_str(const std::vector<uint64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

// The scale factor at flat index k of a scale tensor (E8M0 byte or F32).
float scale_at(const StTensor& s, uint64_t k, uint64_t row, uint64_t col) {
  if (s.dtype == StDtype::F32) {
    float f;
    std::memcpy(&f, s.bytes.data() + 4 * k, 4);
    if (!std::isfinite(f)) fail("{}: scale tensor '{}' is {} at the block of row {}, column {}", s.file, s.name, f, row, col);
    return f;
  }
  const uint8_t e = s.bytes[k];
  if (e == 255) fail("{}: scale tensor '{}' holds the E8M0 NaN code 255 at the block of row {}, column {}", s.file, s.name, row, col);
  return std::ldexp(1.0f, static_cast<int>(e) - 127);
}

void check_scale_dtype(const StTensor& s, bool allow_f32) {
  if (s.dtype == StDtype::F8_E8M0 || s.dtype == StDtype::U8 || (allow_f32 && s.dtype == StDtype::F32)) return;
  fail("{}: scale tensor '{}' has dtype {}, expected F8_E8M0{}", s.file, s.name, st_dtype_name(s.dtype), allow_f32 ? " or F32" : "");
}

void check_finite_row(const StTensor& w, const float* row, uint64_t in, uint64_t r) {
  for (uint64_t c = 0; c < in; ++c)
    if (!std::isfinite(row[c])) fail("{}: tensor '{}' decodes to {} at row {}, column {}", w.file, w.name, row[c], r, c);
}

}  // namespace

float e4m3_to_f32(uint8_t code) {
  const int sign = code >> 7, exp = (code >> 3) & 15, man = code & 7;
  if (exp == 15 && man == 7) return std::nanf("");
  const float mag = exp == 0 ? std::ldexp(static_cast<float>(man), -9) : std::ldexp(static_cast<float>(8 + man), exp - 10);
  return sign ? -mag : mag;
}

float e2m1_to_f32(uint8_t nibble) {
  static constexpr float kMag[8] = {0.f, 0.5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f};
  const float m = kMag[nibble & 7];
  return nibble & 8 ? -m : m;
}

bool is_fp8(const StTensor& w) { return w.dtype == StDtype::F8_E4M3; }
bool is_fp4(const StTensor& w) { return w.dtype == StDtype::I8 || w.dtype == StDtype::U8; }

void check_fp8_scale(const StTensor& w, const StTensor& s, uint64_t out, uint64_t in) {
  check_scale_dtype(s, true);
  if (!fp8_block(s, out, in))
    fail("{}: scale tensor '{}' has shape {}, which is no square power-of-two block grid of '{}' {} (DeepSeek V4: "
         "128x128 blocks, shape [{}, {}])",
         s.file, s.name, shape_str(s.shape), w.name, shape_str(w.shape), (out + 127) / 128, (in + 127) / 128);
}

void check_fp4_scale(const StTensor& w, const StTensor& s, uint64_t out, uint64_t in) {
  check_scale_dtype(s, false);
  if (in % kFp4Group != 0) fail("{}: FP4 tensor '{}' has {} inputs, not a multiple of 32", w.file, w.name, in);
  const std::vector<uint64_t> want = {out, in / kFp4Group};
  if (s.shape != want)
    fail("{}: scale tensor '{}' has shape {}, expected {} (one per 32 inputs of '{}' {})", s.file, s.name, shape_str(s.shape),
         shape_str(want), w.name, shape_str(w.shape));
}

void decode_fp8_rows(const StTensor& w, const StTensor& s, uint64_t in, uint64_t row0, uint64_t nrows, float* dst) {
  const uint64_t sc_cols = s.shape[1], b = fp8_block(s, w.shape[0], in);
  if (!b) fail("{}: scale tensor '{}' does not fit '{}'", s.file, s.name, w.name);
  for (uint64_t r = row0; r < row0 + nrows; ++r, dst += in) {
    const uint8_t* q = w.bytes.data() + r * in;
    for (uint64_t c = 0; c < in; ++c) dst[c] = e4m3_to_f32(q[c]) * scale_at(s, (r / b) * sc_cols + c / b, r, c);
    check_finite_row(w, dst, in, r);
  }
}

void decode_fp4_rows(const StTensor& w, const StTensor& s, uint64_t in, uint64_t row0, uint64_t nrows, float* dst) {
  for (uint64_t r = row0; r < row0 + nrows; ++r, dst += in) {
    const uint8_t* q = w.bytes.data() + r * (in / 2);
    for (uint64_t c = 0; c < in; ++c) {
      const uint8_t nib = c % 2 ? q[c / 2] >> 4 : q[c / 2] & 15;
      dst[c] = e2m1_to_f32(nib) * scale_at(s, r * (in / kFp4Group) + c / kFp4Group, r, c);
    }
    check_finite_row(w, dst, in, r);
  }
}

void repack_fp4_rows_mxfp4(const StTensor& w, const StTensor& s, uint64_t in, uint64_t row0, uint64_t nrows, uint8_t* dst) {
  const uint64_t groups = in / kFp4Group;
  for (uint64_t r = row0; r < row0 + nrows; ++r) {
    const uint8_t* q = w.bytes.data() + r * (in / 2);
    for (uint64_t g = 0; g < groups; ++g, dst += 17) {
      const uint8_t e = s.bytes[r * groups + g];
      if (e == 255) fail("{}: scale tensor '{}' holds the E8M0 NaN code 255 at row {}, inputs {}..{}", s.file, s.name, r, 32 * g, 32 * g + 31);
      dst[0] = e;
      const uint8_t* src = q + 16 * g;
      auto nib = [src](int k) { return static_cast<uint8_t>(k % 2 ? src[k / 2] >> 4 : src[k / 2] & 15); };
      for (int j = 0; j < 16; ++j) dst[1 + j] = static_cast<uint8_t>(nib(j) | (nib(j + 16) << 4));
    }
  }
}

}  // namespace ds4::convert
