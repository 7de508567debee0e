// One test per reader validation rule: a hand-assembled file that breaks exactly that rule is
// rejected with ds4::Error naming the file, the byte offset of the bad field and the problem.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/error.h"
#include "gguf/gguf.h"
#include "gguf_bytes.h"

namespace ds4::gguf {
namespace {

using test::GgufBytes;
using ::testing::HasSubstr;

constexpr uint32_t kF32 = 0, kQ8_0 = 8, kTypeU8 = 0, kTypeU32 = 4, kTypeBool = 7, kTypeString = 8,
                   kTypeArray = 9, kTypeU64 = 10;

// Parses and returns the error message; fails the test if the file is accepted.
std::string reject(const GgufBytes& g) {
  try {
    File::parse(g.span(), "bad.gguf");
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "file was accepted";
  return "";
}

// "bad.gguf: offset <n>: " followed by `what` somewhere in the message.
MATCHER_P2(AtOffset, offset, what, "") {
  std::string prefix = "bad.gguf: offset " + std::to_string(offset) + ": ";
  return arg.rfind(prefix, 0) == 0 && arg.find(what) != std::string::npos;
}

// A valid single-tensor file used as the base of the tensor-rule tests: header, no metadata.
// Tensor info starts at offset 24.
GgufBytes one_tensor(const std::string& name, std::vector<uint64_t> ne, uint32_t type, uint64_t offset,
                     uint64_t data_bytes) {
  GgufBytes g;
  g.header(1, 0).tensor(name, ne, type, offset).pad(32).zeros(data_bytes);
  return g;
}

TEST(GgufValidation, AcceptsTheBaseFiles) {
  auto g = one_tensor("w", {4}, kF32, 0, 16);
  File f = File::parse(g.span(), "ok.gguf");
  ASSERT_EQ(f.tensors().size(), 1u);
  EXPECT_EQ(f.data_offset(), 64u);  // 24 + (8+1) + 4 + 8 + 4 + 8 = 57 -> aligned to 64
  EXPECT_EQ(f.tensors()[0].n_bytes, 16u);
  EXPECT_EQ(f.tensors()[0].data, g.b.data() + 64);

  GgufBytes empty;
  empty.header(0, 0);
  File e = File::parse(empty.span(), "empty.gguf");
  EXPECT_EQ(e.data_offset(), 24u);  // no tensors: no padding (as ggml)
  EXPECT_EQ(e.alignment(), 32u);
}

TEST(GgufValidation, TooShortForMagic) {
  GgufBytes g;
  g.u8('G').u8('G');
  EXPECT_THAT(reject(g), AtOffset(0, "too short"));
}

TEST(GgufValidation, BadMagic) {
  GgufBytes g;
  g.u32(0x46554746).u32(3).u64(0).u64(0);
  EXPECT_THAT(reject(g), AtOffset(0, "bad magic"));
}

TEST(GgufValidation, OnlyVersion3) {
  for (uint32_t v : {1u, 2u, 4u, 0x03000000u}) {
    GgufBytes g;
    g.header(0, 0, v);
    EXPECT_THAT(reject(g), AtOffset(4, "unsupported GGUF version " + std::to_string(v)));
  }
}

TEST(GgufValidation, TruncatedHeaderNamesTheField) {
  GgufBytes g;
  g.u32(0x46554747).u32(3).u32(0);
  EXPECT_THAT(reject(g), AtOffset(8, "truncated: tensor count"));
}

TEST(GgufValidation, MetadataCountBeyondFile) {
  GgufBytes g;
  g.header(0, 1ull << 40).zeros(100);
  EXPECT_THAT(reject(g), AtOffset(16, "metadata count 1099511627776 cannot fit"));
}

TEST(GgufValidation, TensorCountBeyondFile) {
  GgufBytes g;
  g.header(1000, 0).zeros(100);
  EXPECT_THAT(reject(g), AtOffset(8, "tensor count 1000 cannot fit"));
}

TEST(GgufValidation, EmptyKey) {
  GgufBytes g;
  g.header(0, 1).str("").u32(kTypeU8).u8(1);
  EXPECT_THAT(reject(g), AtOffset(24, "metadata key 0 is empty"));
}

TEST(GgufValidation, DuplicateKey) {
  GgufBytes g;
  g.header(0, 2).kv_u32("a", 1);  // 24 + 9 + 4 + 4 = 41
  g.kv_u32("a", 2);
  EXPECT_THAT(reject(g), AtOffset(41, "duplicate metadata key 'a' (first at offset 24)"));
}

TEST(GgufValidation, UnknownValueType) {
  GgufBytes g;
  g.header(0, 1).str("k").u32(13).u32(0);
  EXPECT_THAT(reject(g), AtOffset(33, "key 'k': unknown value type 13"));
}

TEST(GgufValidation, BoolMustBeZeroOrOne) {
  GgufBytes g;
  g.header(0, 1).str("k").u32(kTypeBool).u8(2);
  EXPECT_THAT(reject(g), AtOffset(37, "bool byte is 2, must be 0 or 1"));
}

TEST(GgufValidation, StringPastEndOfFile) {
  GgufBytes g;
  g.header(0, 1).str("k").u32(kTypeString).u64(1000).zeros(20);
  EXPECT_THAT(reject(g), AtOffset(37, "string value length 1000 runs past end of file (20 bytes left)"));
}

TEST(GgufValidation, KeyPastEndOfFile) {
  GgufBytes g;
  g.header(0, 1).u64(1ull << 62).zeros(20);
  EXPECT_THAT(reject(g), AtOffset(24, "metadata key length 4611686018427387904 runs past end of file"));
}

TEST(GgufValidation, ArrayCountBeyondFile) {
  // 1e12 u32 elements would need 4 TB: rejected before any allocation.
  GgufBytes g;
  g.header(0, 1).str("k").u32(kTypeArray).u32(kTypeU32).u64(1000000000000ull).zeros(16);
  EXPECT_THAT(reject(g), AtOffset(41, "array of 1000000000000 u32 elements cannot fit in the 16 bytes left"));
}

TEST(GgufValidation, StringArrayCountBoundedByLengthFields) {
  // Each string needs at least its 8-byte length, so 3 strings cannot fit in 16 bytes.
  GgufBytes g;
  g.header(0, 1).str("k").u32(kTypeArray).u32(kTypeString).u64(3).u64(0).u64(0);
  EXPECT_THAT(reject(g), AtOffset(41, "array of 3 string elements cannot fit"));
}

TEST(GgufValidation, ArrayItemLimit) {
  uint64_t n = Limits::max_metadata_items + 1;
  GgufBytes g;
  g.header(0, 1).str("k").u32(kTypeArray).u32(kTypeU8).u64(n).zeros(n);
  EXPECT_THAT(reject(g), AtOffset(41, "exceeds the limit of 4194304 metadata array items"));
}

TEST(GgufValidation, MetadataStringBudget) {
  // A string longer than the total metadata string budget is refused before it is copied.
  uint64_t n = Limits::max_metadata_string_bytes + 1;
  GgufBytes g;
  g.header(0, 1).str("k").u32(kTypeString).u64(n).zeros(n);
  EXPECT_THAT(reject(g), AtOffset(37, "string value length 268435457 exceeds the 268435455 bytes allowed"));
}

TEST(GgufValidation, UnknownArrayElementType) {
  GgufBytes g;
  g.header(0, 1).str("k").u32(kTypeArray).u32(99).u64(0);
  EXPECT_THAT(reject(g), AtOffset(37, "key 'k': unknown array element type 99"));
}

TEST(GgufValidation, NestingDepthBounded) {
  // max_array_depth levels are fine; one more is rejected at the offending array header.
  auto nested = [](uint32_t levels) {
    GgufBytes g;
    g.header(0, 1).str("k").u32(kTypeArray);
    for (uint32_t i = 1; i < levels; ++i) g.u32(kTypeArray).u64(1);
    g.u32(kTypeU8).u64(1).u8(42);
    return g;
  };
  File ok = File::parse(nested(Limits::max_array_depth).span(), "ok.gguf");
  EXPECT_EQ(ok.metadata().size(), 1u);
  uint64_t deepest = 37 + 12 * uint64_t{Limits::max_array_depth};
  EXPECT_THAT(reject(nested(Limits::max_array_depth + 1)), AtOffset(deepest, "nested deeper than 8 levels"));
}

TEST(GgufValidation, AlignmentMustBeU32) {
  GgufBytes g;
  g.header(0, 1).str("general.alignment").u32(kTypeU64).u64(32);
  EXPECT_THAT(reject(g), AtOffset(24, "general.alignment must be u32, found u64"));
}

TEST(GgufValidation, AlignmentMustBePowerOfTwo) {
  for (uint32_t a : {0u, 48u, 3u}) {
    GgufBytes g;
    g.header(0, 1).kv_u32("general.alignment", a);
    EXPECT_THAT(reject(g), AtOffset(24, "general.alignment is " + std::to_string(a) + ", must be a nonzero power"));
  }
}

TEST(GgufValidation, EmptyTensorName) {
  EXPECT_THAT(reject(one_tensor("", {4}, kF32, 0, 16)), AtOffset(24, "tensor 0 has an empty name"));
}

TEST(GgufValidation, TensorNameLongerThanGgmlAllows) {
  EXPECT_THAT(reject(one_tensor(std::string(64, 'x'), {4}, kF32, 0, 16)),
              AtOffset(24, "tensor name length 64 exceeds the 63 bytes allowed"));
  File ok = File::parse(one_tensor(std::string(63, 'x'), {4}, kF32, 0, 16).span(), "ok.gguf");
  EXPECT_EQ(ok.tensors()[0].name.size(), 63u);
}

TEST(GgufValidation, DuplicateTensorName) {
  GgufBytes g;
  g.header(2, 0).tensor("w", {8}, kF32, 0);  // 24 + 9 + 4 + 8 + 4 + 8 = 57
  g.tensor("w", {8}, kF32, 32).pad(32).zeros(64);
  EXPECT_THAT(reject(g), AtOffset(57, "duplicate tensor name 'w' (first at offset 24)"));
}

TEST(GgufValidation, DimensionCount) {
  GgufBytes g0;
  g0.header(1, 0).str("w").u32(0).u32(kF32).u64(0).pad(32).zeros(4);
  EXPECT_THAT(reject(g0), AtOffset(33, "tensor 'w': n_dims is 0, must be 1..4"));
  EXPECT_THAT(reject(one_tensor("w", {1, 1, 1, 1, 4}, kF32, 0, 16)), AtOffset(33, "n_dims is 5, must be 1..4"));
}

TEST(GgufValidation, ZeroDimension) {
  EXPECT_THAT(reject(one_tensor("w", {4, 0}, kF32, 0, 16)), AtOffset(45, "tensor 'w': dimension 1 is 0"));
}

TEST(GgufValidation, ElementCountOverflow) {
  EXPECT_THAT(reject(one_tensor("w", {1ull << 32, 1ull << 31}, kF32, 0, 16)),
              AtOffset(45, "element count overflows int64 at dimension 1"));
  EXPECT_THAT(reject(one_tensor("w", {1ull << 63}, kF32, 0, 16)), AtOffset(37, "element count overflows int64"));
}

TEST(GgufValidation, ByteSizeOverflow) {
  // 2^62 f32 elements is a valid int64 count but 2^64 bytes.
  EXPECT_THAT(reject(one_tensor("w", {1ull << 31, 1ull << 31}, kF32, 0, 16)), AtOffset(33, "byte size overflows"));
}

TEST(GgufValidation, UnknownTensorType) {
  // 3 is ggml's Q4_1: valid for ggml but not a type DwarfStar handles.
  for (uint32_t t : {3u, 99u}) {
    EXPECT_THAT(reject(one_tensor("w", {32}, t, 0, 64)),
                AtOffset(45, "tensor 'w': unknown or unsupported ggml type id " + std::to_string(t)));
  }
}

TEST(GgufValidation, RowNotWholeBlocks) {
  EXPECT_THAT(reject(one_tensor("w", {33, 2}, kQ8_0, 0, 128)),
              AtOffset(37, "tensor 'w': ne0 = 33 is not a multiple of the q8_0 block size 32"));
}

TEST(GgufValidation, UnalignedDataOffset) {
  EXPECT_THAT(reject(one_tensor("w", {4}, kF32, 16, 64)),
              AtOffset(49, "tensor 'w': data offset 16 is not a multiple of the alignment 32"));
}

TEST(GgufValidation, TensorPastEndOfFile) {
  EXPECT_THAT(reject(one_tensor("w", {4}, kF32, 0, 15)),
              AtOffset(49, "tensor 'w': 16 bytes at data offset 0 run past the end of the file"));
  // An offset so large that offset + size wraps around must not slip through.
  EXPECT_THAT(reject(one_tensor("w", {4}, kF32, ~uint64_t{31}, 16)), AtOffset(49, "run past the end of the file"));
}

TEST(GgufValidation, DataSectionPastEndOfFile) {
  GgufBytes g;
  g.header(1, 0).tensor("w", {4}, kF32, 0);  // ends at 57, data would start at 64
  EXPECT_THAT(reject(g), AtOffset(57, "data section (aligned to 32) starts past the end of the file"));
}

TEST(GgufValidation, OverlappingTensors) {
  GgufBytes g;
  g.header(2, 0).tensor("a", {16}, kF32, 0);  // 64 bytes at 0
  g.tensor("b", {8}, kF32, 32).pad(32).zeros(128);  // starts inside a
  EXPECT_THAT(reject(g), AtOffset(57 + 25, "tensor 'b': data [32, 64) overlaps tensor 'a' [0, 64)"));
}

TEST(GgufValidation, OutOfOrderAndTrailingBytesAreAccepted) {
  // GGUF does not require tensors in offset order; ggml does, we only require no overlap.
  GgufBytes g;
  g.header(2, 0).tensor("a", {8}, kF32, 32).tensor("b", {8}, kF32, 0).pad(32).zeros(64 + 7);
  File f = File::parse(g.span(), "ok.gguf");
  EXPECT_EQ(f.find_tensor("a")->offset, 32u);
  EXPECT_EQ(f.find_tensor("b")->file_offset, f.data_offset());
}

TEST(GgufValidation, OpenReportsMissingFile) {
  try {
    File::open("/nonexistent/dir/x.gguf");
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("/nonexistent/dir/x.gguf: cannot open"));
  }
}

}  // namespace
}  // namespace ds4::gguf
