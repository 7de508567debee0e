// pack-experts: the packed file serves exactly the GGUF's expert bytes (mixed precision);
// freeing punches the ranges out and marks them; a freed GGUF without its packed file is an
// error, never zeros; --restore gives back the original file byte for byte; damaged or foreign
// packed files are refused.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "gguf/gguf.h"
#include "stream/pack.h"
#include "stream/packed_format.h"
#include "stream/store.h"
#include "stream_fixture.h"

using namespace ds4;
using namespace ds4::stream;
namespace fs = std::filesystem;

namespace {

// Reads one component of (layer, e) through the store's own read description.
std::vector<uint8_t> store_read(const ExpertStore& s, int64_t layer, int64_t e, int c) {
  ComponentRead r = s.component(layer, e, c);
  std::vector<uint8_t> buf(r.len);
  int fd = ::open(s.source_path().c_str(), O_RDONLY);
  EXPECT_GE(fd, 0);
  ssize_t got = ::pread(fd, buf.data(), buf.size(), static_cast<off_t>(r.offset));
  ::close(fd);
  EXPECT_GE(got, static_cast<ssize_t>(r.need));
  const auto& cs = s.layout().layers[static_cast<size_t>(layer)].comp[static_cast<size_t>(c)];
  return std::vector<uint8_t>(buf.begin() + r.lead, buf.begin() + r.lead + static_cast<ptrdiff_t>(cs.bytes));
}

// Every component of every expert, as the GGUF at `path` holds it (read before any packing).
std::vector<std::vector<uint8_t>> all_experts(const std::string& path) {
  gguf::File g = gguf::File::open(path);
  ExpertLayout L = ExpertLayout::from_gguf(g);
  std::vector<std::vector<uint8_t>> out;
  for (int64_t il = 0; il < L.n_layer; ++il)
    for (int64_t e = 0; e < L.n_expert; ++e)
      for (int c = 0; c < 3; ++c) {
        const auto* t = g.find_tensor(expert_tensor_name(il, c));
        const uint64_t b = L.layers[static_cast<size_t>(il)].comp[static_cast<size_t>(c)].bytes;
        out.emplace_back(t->data + e * b, t->data + (e + 1) * b);
      }
  return out;
}

void expect_store_serves(const std::string& gguf_path, const std::vector<std::vector<uint8_t>>& want, bool packed) {
  gguf::File g = gguf::File::open(gguf_path);
  auto s = ExpertStore::open(g, {});
  EXPECT_EQ(s->packed(), packed);
  const ExpertLayout& L = s->layout();
  size_t i = 0;
  for (int64_t il = 0; il < L.n_layer; ++il)
    for (int64_t e = 0; e < L.n_expert; ++e)
      for (int c = 0; c < 3; ++c) ASSERT_EQ(store_read(*s, il, e, c), want[i++]) << il << " " << e << " " << c;
}

void flip_byte(const std::string& path, uint64_t off) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(off));
  char ch;
  f.read(&ch, 1);
  ch = static_cast<char>(ch ^ 0x5a);
  f.seekp(static_cast<std::streamoff>(off));
  f.write(&ch, 1);
}

}  // namespace

TEST(StreamPack, LayoutIsMixedPrecision) {
  auto p = test::write_stream_model("layout", test::stream_config());
  gguf::File g = gguf::File::open(p);
  ExpertLayout L = ExpertLayout::from_gguf(g);
  ASSERT_EQ(L.n_layer, 4);
  EXPECT_EQ(L.n_expert, 8);
  EXPECT_EQ(L.layers[0].comp[kGate].type, GgmlType::F32);
  EXPECT_EQ(L.layers[1].comp[kGate].type, GgmlType::Q8_0);
  EXPECT_EQ(L.layers[1].comp[kDown].type, GgmlType::F16);
  EXPECT_EQ(L.layers[0].expert_bytes(), 3u * 64 * 64 * 4);
  EXPECT_NE(L.layers[1].expert_bytes(), L.layers[2].expert_bytes());
}

TEST(StreamPack, KeepServesIdenticalBytes) {
  auto p = test::write_stream_model("keep", test::stream_config());
  const auto original = test::read_file(p);
  const auto want = all_experts(p);
  expect_store_serves(p, want, false);  // straight from the GGUF
  PackReport r = pack_experts(p, p + ".experts", /*keep=*/true);
  EXPECT_EQ(r.experts, 32u);
  EXPECT_FALSE(r.freed);
  EXPECT_EQ(test::read_file(p), original);
  expect_store_serves(p, want, true);  // found next to the model, same bytes
  // Records are aligned for O_DIRECT.
  int fd = ::open((p + ".experts").c_str(), O_RDONLY);
  PackedManifest m = read_packed_manifest(fd, p + ".experts");
  ::close(fd);
  for (int64_t il = 0; il < 4; ++il)
    for (int c = 0; c < 3; ++c) EXPECT_EQ(m.record_offset(il, 5) + m.layers[il].comp_offset[c], (m.record_offset(il, 5) + m.layers[il].comp_offset[c]) / 4096 * 4096);
}

TEST(StreamPack, FreeRefuseWithoutPackedFileAndRestore) {
  auto p = test::write_stream_model("free", test::stream_config());
  const auto original = test::read_file(p);
  const auto want = all_experts(p);
  PackReport r = pack_experts(p, p + ".experts", /*keep=*/false);
  ASSERT_TRUE(r.freed);
  // Every expert tensor is > 4 KiB per expert, so whole blocks were given back.
  uint64_t expert_bytes = 0;
  for (const auto& v : want) expert_bytes += v.size();
  EXPECT_LE(r.gguf_blocks_after + expert_bytes / 2, r.gguf_blocks_before);
  {
    gguf::File g = gguf::File::open(p);
    EXPECT_EQ(count_freed_tensors(g, ExpertLayout::from_gguf(g)), 12);
  }
  EXPECT_NE(test::read_file(p), original);
  expect_store_serves(p, want, true);

  // Without its packed file the freed GGUF must not run.
  fs::rename(p + ".experts", p + ".moved");
  {
    gguf::File g = gguf::File::open(p);
    try {
      ExpertStore::open(g, {});
      FAIL() << "a freed GGUF opened without its packed file";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("pack-experts"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(p + ".experts"), std::string::npos) << e.what();
    }
    StoreOptions o;
    o.packed_path = "-";
    EXPECT_THROW(ExpertStore::open(g, o), Error);
  }
  // Packing again is refused; an explicit path works.
  EXPECT_THROW(pack_experts(p, p + ".again", false), Error);
  {
    gguf::File g = gguf::File::open(p);
    StoreOptions o;
    o.packed_path = p + ".moved";
    EXPECT_TRUE(ExpertStore::open(g, o)->packed());
  }
  PackReport back = restore_experts(p, p + ".moved");
  EXPECT_EQ(back.experts, 32u);
  EXPECT_EQ(test::read_file(p), original);  // byte-identical, checked here independently of the tool's hash
  fs::remove(p + ".moved");
  expect_store_serves(p, want, false);
}

TEST(StreamPack, DamagedOrForeignPackedFilesAreRefused) {
  auto p = test::write_stream_model("damage", test::stream_config(3));
  pack_experts(p, p + ".experts", true);
  const std::string pk = p + ".experts";
  const auto good = test::read_file(pk);
  {  // manifest byte
    flip_byte(pk, 100);
    int fd = ::open(pk.c_str(), O_RDONLY);
    EXPECT_THROW(read_packed_manifest(fd, pk), Error);
    ::close(fd);
    gguf::File g = gguf::File::open(p);
    EXPECT_THROW(ExpertStore::open(g, {}), Error);
  }
  fs::remove(pk);
  { std::ofstream(pk, std::ios::binary).write(reinterpret_cast<const char*>(good.data()), static_cast<std::streamsize>(good.size())); }
  {  // record byte: the per-record checksum catches it
    int fd = ::open(pk.c_str(), O_RDONLY);
    PackedManifest m = read_packed_manifest(fd, pk);
    ::close(fd);
    flip_byte(pk, m.record_offset(2, 3) + 17);
    gguf::File g = gguf::File::open(p);
    auto s = ExpertStore::open(g, {});
    auto gate = store_read(*s, 2, 3, 0), up = store_read(*s, 2, 3, 1), down = store_read(*s, 2, 3, 2);
    EXPECT_FALSE(s->verify(2, 3, gate.data(), up.data(), down.data()));
    auto gate4 = store_read(*s, 2, 4, 0), up4 = store_read(*s, 2, 4, 1), down4 = store_read(*s, 2, 4, 2);
    EXPECT_TRUE(s->verify(2, 4, gate4.data(), up4.data(), down4.data()));
    EXPECT_THROW(restore_experts(p, pk), Error);  // the rebuilt tensor would not hash right
  }
  {  // truncated
    fs::resize_file(pk, good.size() - 4096);
    gguf::File g = gguf::File::open(p);
    EXPECT_THROW(ExpertStore::open(g, {}), Error);
  }
  {  // made from another model of the same shapes
    auto q = test::write_stream_model("damage_other", test::stream_config(4));
    fs::remove(pk);
    pack_experts(q, pk, true);
    gguf::File g = gguf::File::open(p);
    try {
      ExpertStore::open(g, {});
      FAIL() << "foreign packed file accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("different GGUF"), std::string::npos) << e.what();
    }
  }
}
