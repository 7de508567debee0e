// Argument checking of the dispatching API: bad lengths, types, non-finite input and
// importance weights are ds4::Error with a message naming the problem, never a crash.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "common/ggml_lib.h"
#include "core/error.h"
#include "quant/quant.h"
#if DS4_HAVE_IQ2_XXS
#include "quant/iq2_xxs.h"
#endif

namespace ds4::test {
namespace {

using ::testing::HasSubstr;
using quant::dequantize_row;
using quant::quantize_rows;

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

TEST(QuantApi, RejectsLengthsThatAreNotWholeBlocks) {
  std::vector<uint8_t> buf(4096);
  std::vector<float> x(1024, 1.f);
  EXPECT_THAT(error_of([&] { dequantize_row(GgmlType::Q4_K, buf.data(), x.data(), 100); }),
              HasSubstr("length 100 is not a multiple of the q4_K block size 256"));
  EXPECT_THAT(error_of([&] { quantize_rows(GgmlType::Q8_0, x.data(), buf.data(), 1, 33, nullptr); }),
              HasSubstr("not a multiple of the q8_0 block size 32"));
  EXPECT_THAT(error_of([&] { quant::vec_dot(GgmlType::Q2_K, buf.data(), buf.data(), 255); }),
              HasSubstr("q2_K block size 256"));
  EXPECT_THAT(error_of([&] { dequantize_row(GgmlType::Q8_0, buf.data(), x.data(), -32); }), HasSubstr("negative length"));
}

TEST(QuantApi, RejectsUnsupportedTypes) {
  std::vector<uint8_t> buf(4096);
  std::vector<float> x(256, 1.f);
  EXPECT_THAT(error_of([&] { dequantize_row(GgmlType::I32, buf.data(), x.data(), 4); }), HasSubstr("no decoder for type i32"));
  EXPECT_THAT(error_of([&] { dequantize_row(static_cast<GgmlType>(99), buf.data(), x.data(), 4); }),
              HasSubstr("unsupported ggml type id 99"));
  EXPECT_THAT(error_of([&] { quantize_rows(GgmlType::Q8_K, x.data(), buf.data(), 1, 256, nullptr); }),
              HasSubstr("no encoder for type q8_K"));
  EXPECT_THAT(error_of([&] { quant::vec_dot_type(GgmlType::Q8_K); }), HasSubstr("no dot product for weight type q8_K"));
  EXPECT_THAT(error_of([&] { quant::quantize_activation_row(GgmlType::Q4_K, x.data(), buf.data(), 256); }),
              HasSubstr("q4_K is not an activation format"));
}

TEST(QuantApi, RejectsNonFiniteInputForBlockFormats) {
  std::vector<float> x(512, 0.5f);
  std::vector<uint8_t> buf(2048);
  x[300] = NAN;
  EXPECT_THAT(error_of([&] { quantize_rows(GgmlType::Q4_K, x.data(), buf.data(), 2, 256, nullptr); }),
              HasSubstr("non-finite value nan at row 1, column 44"));
  EXPECT_THAT(error_of([&] { quant::quantize_activation_row(GgmlType::Q8_K, x.data(), buf.data(), 512); }),
              HasSubstr("non-finite value nan at row 0, column 300"));
  x[300] = 0.f;
  std::vector<float> w(256, 1.f);
  w[7] = -1.f;
  EXPECT_THAT(error_of([&] { quantize_rows(GgmlType::Q2_K, x.data(), buf.data(), 2, 256, w.data()); }),
              HasSubstr("negative importance weight -1 at column 7"));
  w[7] = INFINITY;
  EXPECT_THAT(error_of([&] { quantize_rows(GgmlType::Q2_K, x.data(), buf.data(), 2, 256, w.data()); }),
              HasSubstr("importance weights"));
}

TEST(QuantApi, NullBuffersAreErrorsButEmptyRowsAreFine) {
  std::vector<float> x(32, 1.f);
  EXPECT_THAT(error_of([&] { dequantize_row(GgmlType::Q8_0, nullptr, x.data(), 32); }), HasSubstr("null buffer"));
  dequantize_row(GgmlType::Q8_0, nullptr, nullptr, 0);
  EXPECT_EQ(quantize_rows(GgmlType::Q4_K, nullptr, nullptr, 0, 256, nullptr), 0u);
  EXPECT_EQ(quant::vec_dot(GgmlType::Q8_0, nullptr, nullptr, 0), 0.f);
}

TEST(QuantApi, ReturnsBytesWritten) {
  std::vector<float> x(3 * 512, 0.25f);
  std::vector<uint8_t> buf(3 * 512 * 4);
  EXPECT_EQ(quantize_rows(GgmlType::Q4_K, x.data(), buf.data(), 3, 512, nullptr), 3u * 2 * 144);
  EXPECT_EQ(quantize_rows(GgmlType::Q2_K, x.data(), buf.data(), 3, 512, nullptr), 3u * 2 * 84);
  EXPECT_EQ(quantize_rows(GgmlType::Q8_0, x.data(), buf.data(), 3, 512, nullptr), 3u * 16 * 34);
  EXPECT_EQ(quantize_rows(GgmlType::BF16, x.data(), buf.data(), 3, 512, nullptr), 3u * 512 * 2);
}


#if DS4_HAVE_IQ2_XXS
// The IQ2_XXS codec is tested in tests/unit/quant_iq2; here only that the API routes to it.
TEST(QuantApi, RoutesIq2XxsToItsCodec) {
  std::mt19937 rng(5);
  std::vector<uint8_t> w(66 * 4);
  for (auto& b : w) b = static_cast<uint8_t>(rng());
  for (int b = 0; b < 4; ++b) w[66 * b] = 0x12, w[66 * b + 1] = 0x2C;  // d ~ 0.07
  std::vector<float> want(1024), got(1024);
  ggml_fn<void (*)(const void*, float*, int64_t)>("dequantize_row_iq2_xxs")(w.data(), want.data(), 1024);
  dequantize_row(GgmlType::IQ2_XXS, w.data(), got.data(), 1024);
  EXPECT_TRUE(std::memcmp(want.data(), got.data(), 4096) == 0);
  std::vector<float> x(1024);
  for (auto& v : x) v = static_cast<float>(static_cast<int>(rng() % 200) - 100) / 64.f;
  std::vector<uint8_t> a(292 * 4);
  quant::quantize_activation_row(quant::vec_dot_type(GgmlType::IQ2_XXS), x.data(), a.data(), 1024);
  const float s = quant::vec_dot_scalar(GgmlType::IQ2_XXS, w.data(), a.data(), 1024);
  EXPECT_EQ(s, quant::vec_dot_iq2_xxs_q8_K_scalar(w.data(), a.data(), 1024));
  EXPECT_EQ(quant::vec_dot(GgmlType::IQ2_XXS, w.data(), a.data(), 1024), s);  // AVX2 equals scalar
}
#endif

}  // namespace
}  // namespace ds4::test
