#include "stream/packed_format.h"

#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "gguf/gguf.h"

namespace ds4::stream {

namespace {

uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

struct Out {
  std::vector<uint8_t> b;
  template <class T>
  void put(T v) {
    size_t at = b.size();
    b.resize(at + sizeof(T));
    std::memcpy(b.data() + at, &v, sizeof(T));
  }
};

struct In {
  const uint8_t* p;
  size_t n, at = 0;
  const std::string& path;
  template <class T>
  T get() {
    if (at + sizeof(T) > n) fail("{}: manifest truncated at byte {}", path, kHeaderBytes + at);
    T v;
    std::memcpy(&v, p + at, sizeof(T));
    at += sizeof(T);
    return v;
  }
};

void read_exact(int fd, uint64_t off, void* dst, size_t n, const std::string& path) {
  auto* d = static_cast<uint8_t*>(dst);
  while (n > 0) {
    ssize_t r = ::pread(fd, d, n, static_cast<off_t>(off));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) fail("{}: read at offset {}: {}", path, off, std::strerror(errno));
    if (r == 0) fail("{}: unexpected end of file at offset {}", path, off);
    d += r, off += static_cast<uint64_t>(r), n -= static_cast<size_t>(r);
  }
}

constexpr char kMarkerMagic[16] = {'D', 'S', '4', 'X', '-', 'F', 'R', 'E', 'E', 'D', '-', 'E', 'X', 'P', 'v', '1'};

}  // namespace

uint64_t PackedManifest::hash_record(const LayerShape& s, const uint8_t* gate, const uint8_t* up, const uint8_t* down) {
  XXH64_state_t* st = XXH64_createState();
  XXH64_reset(st, 0);
  XXH64_update(st, gate, s.comp[0].bytes);
  XXH64_update(st, up, s.comp[1].bytes);
  XXH64_update(st, down, s.comp[2].bytes);
  uint64_t h = XXH64_digest(st);
  XXH64_freeState(st);
  return h;
}

PackedManifest plan_packed(const ExpertLayout& layout, uint32_t alignment) {
  PackedManifest m;
  m.alignment = alignment;
  m.n_expert = layout.n_expert;
  m.record_hash.assign(static_cast<size_t>(layout.n_layer * layout.n_expert), 0);
  for (const auto& ls : layout.layers) {
    PackedLayer pl;
    pl.shape = ls;
    uint64_t at = 0;
    for (int c = 0; c < 3; ++c) {
      pl.comp_offset[static_cast<size_t>(c)] = at;
      at = align_up(at + ls.comp[static_cast<size_t>(c)].bytes, alignment);
    }
    pl.record_stride = at;
    m.layers.push_back(pl);
  }
  // Manifest size is fixed by the counts, so the payload offset is known before encoding.
  const uint64_t manifest_bytes = 3 * 8 + 8 + m.layers.size() * (8 + 3 * 56 + 16) + m.record_hash.size() * 8;
  m.payload_offset = align_up(kHeaderBytes + manifest_bytes, alignment);
  uint64_t at = m.payload_offset;
  for (auto& pl : m.layers) {
    pl.offset = at;
    at += pl.record_stride * static_cast<uint64_t>(m.n_expert);
  }
  m.file_size = at;
  return m;
}

std::vector<uint8_t> encode_packed_prefix(PackedManifest& m) {
  Out man;
  man.put<uint64_t>(m.gguf_meta_hash);
  man.put<uint64_t>(m.gguf_file_hash);
  man.put<uint64_t>(m.gguf_file_size);
  man.put<uint32_t>(static_cast<uint32_t>(m.layers.size()));
  man.put<uint32_t>(static_cast<uint32_t>(m.n_expert));
  for (const auto& pl : m.layers) {
    man.put<uint32_t>(static_cast<uint32_t>(pl.shape.layer));
    man.put<uint32_t>(0);
    for (int c = 0; c < 3; ++c) {
      const ComponentShape& cs = pl.shape.comp[static_cast<size_t>(c)];
      man.put<uint32_t>(static_cast<uint32_t>(cs.type));
      man.put<uint32_t>(0);
      man.put<int64_t>(cs.n_in);
      man.put<int64_t>(cs.n_out);
      man.put<uint64_t>(cs.row_stride);
      man.put<uint64_t>(cs.bytes);
      man.put<uint64_t>(pl.comp_offset[static_cast<size_t>(c)]);
      man.put<uint64_t>(pl.tensor_hash[static_cast<size_t>(c)]);
    }
    man.put<uint64_t>(pl.record_stride);
    man.put<uint64_t>(pl.offset);
  }
  for (uint64_t h : m.record_hash) man.put<uint64_t>(h);
  m.manifest_hash = XXH64(man.b.data(), man.b.size(), 0);

  Out hd;
  for (char ch : kPackedMagic) hd.put<char>(ch);
  hd.put<uint32_t>(kPackedVersion);
  hd.put<uint32_t>(m.alignment);
  hd.put<uint64_t>(kHeaderBytes);
  hd.put<uint64_t>(man.b.size());
  hd.put<uint64_t>(m.manifest_hash);
  hd.put<uint64_t>(m.payload_offset);
  hd.put<uint64_t>(m.file_size);
  hd.put<uint64_t>(XXH64(hd.b.data(), hd.b.size(), 0));
  std::vector<uint8_t> out = std::move(hd.b);
  out.insert(out.end(), man.b.begin(), man.b.end());
  if (out.size() > m.payload_offset) fail("packed manifest larger than planned ({} > {})", out.size(), m.payload_offset);
  out.resize(m.payload_offset, 0);
  return out;
}

PackedManifest read_packed_manifest(int fd, const std::string& path) {
  uint8_t h[kHeaderBytes];
  read_exact(fd, 0, h, sizeof h, path);
  if (std::memcmp(h, kPackedMagic, 8) != 0) fail("{}: not a DwarfStar packed expert file (bad magic)", path);
  uint64_t stored;
  std::memcpy(&stored, h + 56, 8);
  if (XXH64(h, 56, 0) != stored) fail("{}: header checksum mismatch (file damaged)", path);
  uint32_t version, alignment;
  uint64_t man_off, man_bytes, man_hash;
  PackedManifest m;
  std::memcpy(&version, h + 8, 4);
  std::memcpy(&alignment, h + 12, 4);
  std::memcpy(&man_off, h + 16, 8);
  std::memcpy(&man_bytes, h + 24, 8);
  std::memcpy(&man_hash, h + 32, 8);
  std::memcpy(&m.payload_offset, h + 40, 8);
  std::memcpy(&m.file_size, h + 48, 8);
  if (version != kPackedVersion) fail("{}: packed format version {}, this build reads {}", path, version, kPackedVersion);
  if (alignment == 0 || (alignment & (alignment - 1)) != 0 || alignment > (1u << 24))
    fail("{}: bad alignment {}", path, alignment);
  if (man_off != kHeaderBytes || man_bytes > (64ull << 20) || man_off + man_bytes > m.payload_offset)
    fail("{}: bad manifest extent (offset {}, {} bytes, payload at {})", path, man_off, man_bytes, m.payload_offset);
  m.alignment = alignment;
  std::vector<uint8_t> mb(man_bytes);
  read_exact(fd, man_off, mb.data(), mb.size(), path);
  if (XXH64(mb.data(), mb.size(), 0) != man_hash) fail("{}: manifest checksum mismatch (file damaged)", path);
  m.manifest_hash = man_hash;
  In in{mb.data(), mb.size(), 0, path};
  m.gguf_meta_hash = in.get<uint64_t>();
  m.gguf_file_hash = in.get<uint64_t>();
  m.gguf_file_size = in.get<uint64_t>();
  const uint32_t n_layer = in.get<uint32_t>();
  m.n_expert = in.get<uint32_t>();
  if (n_layer == 0 || n_layer > 4096 || m.n_expert <= 0 || m.n_expert > 65536)
    fail("{}: implausible counts ({} layers, {} experts)", path, n_layer, m.n_expert);
  uint64_t expect_at = m.payload_offset;
  for (uint32_t i = 0; i < n_layer; ++i) {
    PackedLayer pl;
    pl.shape.layer = in.get<uint32_t>();
    in.get<uint32_t>();
    uint64_t at = 0;
    for (int c = 0; c < 3; ++c) {
      ComponentShape& cs = pl.shape.comp[static_cast<size_t>(c)];
      const uint32_t type_id = in.get<uint32_t>();
      in.get<uint32_t>();
      auto tr = type_traits(type_id);
      if (!tr) fail("{}: layer {} {}: unknown ggml type {}", path, i, kComponentName[c], type_id);
      cs.type = tr->type;
      cs.n_in = in.get<int64_t>();
      cs.n_out = in.get<int64_t>();
      cs.row_stride = in.get<uint64_t>();
      cs.bytes = in.get<uint64_t>();
      pl.comp_offset[static_cast<size_t>(c)] = in.get<uint64_t>();
      pl.tensor_hash[static_cast<size_t>(c)] = in.get<uint64_t>();
      if (cs.n_in <= 0 || cs.n_out <= 0 || cs.n_in % tr->block_elems != 0 ||
          cs.row_stride != row_bytes(*tr, static_cast<uint64_t>(cs.n_in)) ||
          cs.bytes != cs.row_stride * static_cast<uint64_t>(cs.n_out) || pl.comp_offset[static_cast<size_t>(c)] < at ||
          pl.comp_offset[static_cast<size_t>(c)] % alignment != 0)
        fail("{}: layer {} {}: inconsistent geometry", path, i, kComponentName[c]);
      at = pl.comp_offset[static_cast<size_t>(c)] + cs.bytes;
    }
    pl.record_stride = in.get<uint64_t>();
    pl.offset = in.get<uint64_t>();
    if (pl.record_stride < at || pl.record_stride % alignment != 0 || pl.offset != expect_at)
      fail("{}: layer {}: record stride {} / offset {} inconsistent", path, i, pl.record_stride, pl.offset);
    expect_at += pl.record_stride * static_cast<uint64_t>(m.n_expert);
    m.layers.push_back(pl);
  }
  m.record_hash.resize(static_cast<size_t>(n_layer) * static_cast<size_t>(m.n_expert));
  for (auto& x : m.record_hash) x = in.get<uint64_t>();
  if (in.at != mb.size()) fail("{}: {} unexpected bytes after the manifest", path, mb.size() - in.at);
  if (expect_at != m.file_size) fail("{}: records end at {}, header says file size {}", path, expect_at, m.file_size);
  off_t end = ::lseek(fd, 0, SEEK_END);
  if (end < 0 || static_cast<uint64_t>(end) < m.file_size)
    fail("{}: file is {} bytes, manifest needs {} (truncated)", path, static_cast<long long>(end), m.file_size);
  return m;
}

void check_packed_matches(const PackedManifest& m, const ExpertLayout& layout, uint64_t meta_hash,
                          const std::string& packed_path, const std::string& gguf_path) {
  if (m.gguf_meta_hash != meta_hash)
    fail("{}: packed expert file was made from a different GGUF than {} (header hash {:016x}, file has {:016x})",
         packed_path, gguf_path, m.gguf_meta_hash, meta_hash);
  if (static_cast<int64_t>(m.layers.size()) != layout.n_layer || m.n_expert != layout.n_expert)
    fail("{}: {} layers x {} experts, {} has {} x {}", packed_path, m.layers.size(), m.n_expert, gguf_path,
         layout.n_layer, layout.n_expert);
  for (int64_t il = 0; il < layout.n_layer; ++il)
    for (int c = 0; c < 3; ++c) {
      const auto& a = m.layers[static_cast<size_t>(il)].shape.comp[static_cast<size_t>(c)];
      const auto& b = layout.layers[static_cast<size_t>(il)].comp[static_cast<size_t>(c)];
      if (a.type != b.type || a.n_in != b.n_in || a.n_out != b.n_out || a.bytes != b.bytes)
        fail("{}: {} differs from {}", packed_path, expert_tensor_name(il, c), gguf_path);
    }
}

uint64_t gguf_meta_hash(const gguf::File& f) {
  // Header + tensor table, then the first and last 4 KiB of every tensor that is not a routed
  // expert (those may be freed): re-trained weights of the same shapes give another value.
  std::vector<uint8_t> b(static_cast<size_t>(f.data_offset()));
  FILE* fp = std::fopen(f.path().c_str(), "rb");
  if (!fp) fail("{}: cannot open: {}", f.path(), std::strerror(errno));
  size_t got = std::fread(b.data(), 1, b.size(), fp);
  std::fclose(fp);
  if (got != b.size()) fail("{}: short read of the header", f.path());
  XXH64_state_t* st = XXH64_createState();
  XXH64_reset(st, 0);
  XXH64_update(st, b.data(), b.size());
  for (const auto& t : f.tensors()) {
    if (t.name.find("_exps.weight") != std::string::npos) continue;
    const size_t n = static_cast<size_t>(std::min<uint64_t>(t.n_bytes, 4096));
    XXH64_update(st, t.data, n);
    XXH64_update(st, t.data + t.n_bytes - n, n);
  }
  const uint64_t h = XXH64_digest(st);
  XXH64_freeState(st);
  return h;
}

std::array<uint8_t, kMarkerBytes> make_freed_marker(uint64_t manifest_hash, uint64_t tensor_hash) {
  std::array<uint8_t, kMarkerBytes> m{};
  std::memcpy(m.data(), kMarkerMagic, 16);
  std::memcpy(m.data() + 16, &manifest_hash, 8);
  std::memcpy(m.data() + 24, &tensor_hash, 8);
  return m;
}

bool is_freed_marker(std::span<const uint8_t> bytes, uint64_t* manifest_hash) {
  if (bytes.size() < kMarkerBytes || std::memcmp(bytes.data(), kMarkerMagic, 16) != 0) return false;
  if (manifest_hash) std::memcpy(manifest_hash, bytes.data() + 16, 8);
  return true;
}

int count_freed_tensors(const gguf::File& f, const ExpertLayout& layout) {
  int n = 0;
  for (int64_t il = 0; il < layout.n_layer; ++il)
    for (int c = 0; c < 3; ++c) {
      const gguf::TensorInfo* t = f.find_tensor(expert_tensor_name(il, c));
      if (t && is_freed_marker({t->data, static_cast<size_t>(t->n_bytes)})) ++n;
    }
  return n;
}

std::string default_packed_path(const std::string& gguf_path) { return gguf_path + ".experts"; }

}  // namespace ds4::stream
