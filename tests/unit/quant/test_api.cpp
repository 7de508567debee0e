// Argument checking of the dispatching API: bad lengths, types, non-finite input and
// importance weights are ds4::Error with a message naming the problem, never a crash.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/error.h"
#include "quant/quant.h"

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

}  // namespace
}  // namespace ds4::test
