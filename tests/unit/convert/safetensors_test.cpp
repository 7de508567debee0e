// Safetensors reader: valid images parse to the expected tensors and values; every kind of
// malformed image is refused with a message naming the problem.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "convert/safetensors.h"
#include "core/error.h"

using ds4::convert::SafetensorsFile;
using ds4::convert::StDtype;

namespace {

// header JSON + data -> file image (u64 LE length, header, data).
std::vector<uint8_t> image(const std::string& header, const std::vector<uint8_t>& data) {
  std::vector<uint8_t> out(8);
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(n >> (8 * i));
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

std::vector<uint8_t> floats(std::initializer_list<float> v) {
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), std::data(v), b.size());
  return b;
}

// Expects parsing to fail with a message containing `needle`.
void expect_error(const std::vector<uint8_t>& img, const std::string& needle) {
  try {
    SafetensorsFile::parse(img, "t.safetensors");
    FAIL() << "accepted a bad image; expected error containing: " << needle;
  } catch (const ds4::Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("t.safetensors"), std::string::npos) << e.what();
  }
}

}  // namespace

TEST(ConvertSafetensors, ParsesTensorsMetadataAndValues) {
  // a: F32 [2,2]; b: BF16 [2] = {1.0, -2.0} (0x3F80, 0xC000); c: F16 [1] = 0.5 (0x3800); d: I64 [1] = 7
  std::vector<uint8_t> data = floats({1.5f, -2.25f, 3.0f, 0.125f});
  for (uint8_t x : {0x80, 0x3F, 0x00, 0xC0, 0x00, 0x38}) data.push_back(x);
  for (int i = 0; i < 8; ++i) data.push_back(i == 0 ? 7 : 0);
  auto img = image(
      R"({"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},)"
      R"("b":{"dtype":"BF16","shape":[2],"data_offsets":[16,20]},"c":{"dtype":"F16","shape":[1],"data_offsets":[20,22]},)"
      R"("d":{"dtype":"I64","shape":[1],"data_offsets":[22,30]}}   )",
      data);
  auto f = SafetensorsFile::parse(img, "t.safetensors");
  ASSERT_EQ(f.tensors().size(), 4u);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  const auto* a = f.find("a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->dtype, StDtype::F32);
  EXPECT_EQ(a->shape, (std::vector<uint64_t>{2, 2}));
  EXPECT_EQ(ds4::convert::to_f32(*a), (std::vector<float>{1.5f, -2.25f, 3.0f, 0.125f}));
  EXPECT_EQ(ds4::convert::to_f32(*f.find("b")), (std::vector<float>{1.0f, -2.0f}));
  EXPECT_EQ(ds4::convert::to_f32(*f.find("c")), (std::vector<float>{0.5f}));
  EXPECT_EQ(ds4::convert::to_i64(*f.find("d")), (std::vector<int64_t>{7}));
  EXPECT_EQ(f.find("missing"), nullptr);
  EXPECT_THROW(ds4::convert::to_i64(*a), ds4::Error);      // float tensor read as ints
  EXPECT_THROW(ds4::convert::to_f32(*f.find("d")), ds4::Error);  // int tensor read as floats
}

TEST(ConvertSafetensors, RejectsMalformedImages) {
  const auto d16 = floats({1, 2, 3, 4});
  const std::string ok_entry = R"("a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]})";
  expect_error({1, 2, 3}, "too short");
  {
    auto img = image("{" + ok_entry + "}", d16);
    img[0] = 0xFF;  // header length far beyond the file
    img[1] = 0xFF;
    img[2] = 0x0F;
    expect_error(img, "past the end");
  }
  {
    auto img = image("{" + ok_entry + "}", d16);
    for (int i = 0; i < 8; ++i) img[i] = 0xFF;
    expect_error(img, "exceeds");
  }
  expect_error(image("[1,2]", d16), "does not start with");
  expect_error(image("{\"a\": ", d16), "not valid JSON");
  expect_error(image(R"({"a":{"dtype":"Q4","shape":[4],"data_offsets":[0,16]}})", d16), "not a safetensors dtype");
  expect_error(image(R"({"a":{"dtype":"F32","shape":[-4],"data_offsets":[0,16]}})", d16), "non-negative integer");
  expect_error(image(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,12]}})", d16), "need 16");
  expect_error(image(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[8,40]}})", d16), "past the 16 byte data buffer");
  expect_error(image(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[16,0]}})", d16), "ends before it begins");
  expect_error(image(R"({"a":{"dtype":"F32","shape":[4]}})", d16), "data_offsets");
  expect_error(image(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16],"x":1}})", d16), "not a known field");
  expect_error(image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                     floats({1, 2, 3})),
               "overlap");
  expect_error(image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[12,16]}})",
                     d16),
               "belong to no tensor");
  expect_error(image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", d16), "at the end of the data buffer");
  expect_error(image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
                     d16),
               "twice");
  expect_error(image(R"({"__metadata__":{"k":1},)" + ok_entry + "}", d16), "__metadata__.k");
}

TEST(ConvertSafetensors, OpenReportsMissingFile) {
  EXPECT_THROW(SafetensorsFile::open("/nonexistent/model.safetensors"), ds4::Error);
}

TEST(ConvertSafetensors, ReadsCommittedFixture) {
  auto f = SafetensorsFile::open(std::string(DS4_FIXTURES_DIR) + "/deepseek4/swa_tiny/model.safetensors");
  const auto* t = f.find("model.layers.0.ffn.gate.tid2eid");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->dtype, StDtype::I64);
  EXPECT_EQ(t->shape, (std::vector<uint64_t>{256, 2}));
  const auto* e = f.find("model.embed_tokens.weight");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->shape, (std::vector<uint64_t>{256, 32}));
}

// Random corruption of a valid image must give either a valid file or a ds4::Error, never a
// crash or an out-of-range read (run under ASan in `make test-asan`-style builds).
TEST(ConvertSafetensors, CorruptedImagesNeverCrash) {
  std::vector<uint8_t> data = floats({1, 2, 3, 4, 5, 6});
  auto good = image(
      R"({"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},"b":{"dtype":"F16","shape":[4],"data_offsets":[16,24]}})",
      data);
  uint64_t s = 0x243F6A8885A308D3ull;
  auto next = [&] {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return s;
  };
  int accepted = 0, rejected = 0;
  for (int iter = 0; iter < 20000; ++iter) {
    auto img = good;
    const int flips = 1 + static_cast<int>(next() % 4);
    for (int k = 0; k < flips; ++k) img[next() % img.size()] = static_cast<uint8_t>(next());
    if (next() % 8 == 0) img.resize(next() % img.size());
    try {
      auto f = SafetensorsFile::parse(img, "fuzz");
      for (const auto& t : f.tensors()) {
        // Any accepted tensor must be readable in full without leaving the image.
        ASSERT_LE(t.bytes.data() + t.bytes.size(), img.data() + img.size());
        if (t.dtype == StDtype::F32 || t.dtype == StDtype::F16 || t.dtype == StDtype::BF16) ds4::convert::to_f32(t);
      }
      ++accepted;
    } catch (const ds4::Error&) {
      ++rejected;
    }
  }
  EXPECT_GT(rejected, 0);
  EXPECT_GT(accepted + rejected, 0);
}
