// Disk KV cache file format: layout at documented offsets, SHA-1 against known vectors,
// round trip, and every damaged form rejected with a message naming the check.
#include <gtest/gtest.h>

#include <xxhash.h>

#include <cstring>
#include <functional>

#include "core/error.h"
#include "kvdisk/format.h"
#include "kvdisk/sha1.h"

namespace ds4::kvdisk {
namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

Header sample_header() {
  Header h;
  h.model_id = "0123456789abcdef";
  h.reason = SaveReason::Continued;
  h.n_tokens = 3;
  h.n_ctx = 4096;
  h.created = 1700000000;
  h.last_used = 1700000123;
  h.hits = 7;
  return h;
}

TEST(KvFormat, Sha1MatchesPublishedVectors) {
  // FIPS 180-2 / RFC 3174 test vectors.
  EXPECT_EQ(to_hex(Sha1::of("abc")), "a9993e364706816aba3e25717850c26c9cd0d89d");
  EXPECT_EQ(to_hex(Sha1::of("")), "da39a3ee5e6b4b0d3255bfef95601890afd80709");
  Sha1 inc;
  inc.update("abcdbcdecdefdefgefghfghighij");
  const Digest mid = inc.digest();  // digest() does not end the stream
  inc.update("hijkijkljklmklmnlmnomnopnopq");
  EXPECT_EQ(to_hex(inc.digest()), "84983e441c3bd26ebaae4aa1f95129e5e54670f1");
  EXPECT_EQ(mid, Sha1::of("abcdbcdecdefdefgefghfghighij"));
  Digest d{};
  EXPECT_TRUE(from_hex("a9993e364706816aba3e25717850c26c9cd0d89d", d));
  EXPECT_EQ(d, Sha1::of("abc"));
  EXPECT_FALSE(from_hex("A9993e364706816aba3e25717850c26c9cd0d89d", d));
  EXPECT_FALSE(from_hex("a9993e", d));
}

TEST(KvFormat, LayoutAtDocumentedOffsetsAndRoundTrip) {
  const std::string text = "<BOS>hello world";
  const std::vector<uint8_t> payload = {1, 2, 3, 4, 5};
  const std::vector<ToolEntry> tools = {{{"call_a", "call_b"}, "<dsml block>"}, {{"toolu_x"}, ""}};
  const auto b = encode_file(sample_header(), text, payload, tools);
  ASSERT_GE(b.size(), kHeaderBytes);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(b.data()), 8), "DS4KVDSK");
  uint32_t u32;
  uint64_t u64;
  std::memcpy(&u32, b.data() + 8, 4);
  EXPECT_EQ(u32, 1u);
  std::memcpy(&u32, b.data() + 12, 4);
  EXPECT_EQ(u32, 128u);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(b.data() + 16), 16), "0123456789abcdef");
  EXPECT_EQ(0, std::memcmp(b.data() + 32, Sha1::of(text).data(), 20));
  std::memcpy(&u32, b.data() + 52, 4);
  EXPECT_EQ(u32, 2u);
  std::memcpy(&u64, b.data() + 56, 8);
  EXPECT_EQ(u64, 3u);
  std::memcpy(&u64, b.data() + 88, 8);
  EXPECT_EQ(u64, 7u);
  std::memcpy(&u64, b.data() + 96, 8);
  EXPECT_EQ(u64, text.size());
  std::memcpy(&u64, b.data() + 104, 8);
  EXPECT_EQ(u64, payload.size());
  // The text is stored verbatim right after the header (readable in a hex dump).
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(b.data() + 128), text.size()), text);
  EXPECT_EQ(0, std::memcmp(b.data() + 128 + text.size(), payload.data(), payload.size()));

  const Decoded d = decode_file(b, "f.kv");
  EXPECT_EQ(d.text, text);
  EXPECT_EQ(d.payload, payload);
  ASSERT_EQ(d.tools.size(), 2u);
  EXPECT_EQ(d.tools[0].ids, (std::vector<std::string>{"call_a", "call_b"}));
  EXPECT_EQ(d.tools[0].block, "<dsml block>");
  EXPECT_EQ(d.tools[1].ids, (std::vector<std::string>{"toolu_x"}));
  EXPECT_EQ(d.header.model_id, "0123456789abcdef");
  EXPECT_EQ(d.header.reason, SaveReason::Continued);
  EXPECT_EQ(d.header.n_ctx, 4096u);
  EXPECT_EQ(d.header.created, 1700000000);
  EXPECT_EQ(d.header.last_used, 1700000123);
  EXPECT_EQ(d.header.file_bytes(), b.size());

  // No tool map: the section is absent (0 bytes).
  const auto plain = encode_file(sample_header(), text, payload, {});
  EXPECT_EQ(plain.size(), 128 + text.size() + payload.size() + 8);
  EXPECT_TRUE(decode_file(plain, "g.kv").tools.empty());
}

TEST(KvFormat, DamagedFilesAreRejectedNamingTheCheck) {
  const auto good = encode_file(sample_header(), "some text", std::vector<uint8_t>(100, 9), {{{"id"}, "blk"}});
  auto with = [&](size_t at, uint8_t v) {
    auto b = good;
    b[at] = v;
    return b;
  };
  EXPECT_NE(error_of([&] { decode_file(with(0, 'X'), "a.kv"); }).find("bad magic"), std::string::npos);
  EXPECT_NE(error_of([&] { decode_file(with(60, 0xff), "a.kv"); }).find("header checksum"), std::string::npos);
  EXPECT_NE(error_of([&] { decode_file(with(130, 'Z'), "a.kv"); }).find("body checksum"), std::string::npos);
  EXPECT_NE(error_of([&] { decode_file(with(good.size() - 1, 0), "a.kv"); }).find("body checksum"), std::string::npos);
  for (size_t cut : {size_t{0}, size_t{5}, size_t{127}, size_t{128}, good.size() - 9, good.size() - 1}) {
    std::vector<uint8_t> t(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(cut));
    const std::string m = error_of([&] { decode_file(t, "cut.kv"); });
    EXPECT_NE(m.find("truncated"), std::string::npos) << cut << ": " << m;
    EXPECT_NE(m.find("cut.kv"), std::string::npos) << m;
  }
  auto longer = good;
  longer.push_back(0);
  EXPECT_NE(error_of([&] { decode_file(longer, "a.kv"); }).find("trailing bytes"), std::string::npos);
  // A version this build does not know (header resealed so only the version check fails).
  Header h = decode_header(good, "a.kv");
  auto v2 = encode_header(h);
  v2[8] = 2;
  const uint64_t sum = XXH64(v2.data(), 120, 0);
  std::memcpy(v2.data() + 120, &sum, 8);
  EXPECT_NE(error_of([&] { decode_header(v2, "a.kv"); }).find("version 2"), std::string::npos);
  EXPECT_NE(error_of([&] { decode_tools(std::vector<uint8_t>{1, 0, 0, 0, 5, 0, 0, 0}, "t"); }).find("tool map truncated"),
            std::string::npos);
  auto tm = encode_tools({{{"id1"}, "block"}});
  tm.back() ^= 1;
  EXPECT_NE(error_of([&] { decode_tools(tm, "t"); }).find("tool map checksum mismatch"), std::string::npos);
  // A map whose checksum is right but whose counts run past its end.
  std::vector<uint8_t> bad(8, 0);
  for (uint8_t x : {2, 0, 0, 0, 1, 0, 0, 0, 9, 0, 0, 0}) bad.push_back(x);
  const uint64_t bs = XXH64(bad.data() + 8, bad.size() - 8, 0);
  std::memcpy(bad.data(), &bs, 8);
  EXPECT_NE(error_of([&] { decode_tools(bad, "t"); }).find("tool map truncated"), std::string::npos);
  EXPECT_NE(error_of([&] { encode_header(Header{}); }).find("model id"), std::string::npos);
}

}  // namespace
}  // namespace ds4::kvdisk
