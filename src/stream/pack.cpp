#include "stream/pack.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include "core/error.h"
#include "gguf/gguf.h"
#include "stream/layout.h"
#include "stream/packed_format.h"

namespace ds4::stream {

namespace {

class Fd {
 public:
  Fd(const std::string& path, int flags, mode_t mode = 0644) : path_(path) {
    fd_ = ::open(path.c_str(), flags | O_CLOEXEC, mode);
    if (fd_ < 0) fail("{}: cannot open: {}", path, std::strerror(errno));
  }
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }
  const std::string& path() const { return path_; }
  void write_at(const void* p, size_t n, uint64_t off) const {
    auto* b = static_cast<const uint8_t*>(p);
    while (n > 0) {
      ssize_t w = ::pwrite(fd_, b, n, static_cast<off_t>(off));
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) fail("{}: write at offset {}: {}", path_, off, std::strerror(errno));
      b += w, off += static_cast<uint64_t>(w), n -= static_cast<size_t>(w);
    }
  }
  void read_at(void* p, size_t n, uint64_t off) const {
    auto* b = static_cast<uint8_t*>(p);
    while (n > 0) {
      ssize_t r = ::pread(fd_, b, n, static_cast<off_t>(off));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) fail("{}: read at offset {}: {}", path_, off, std::strerror(errno));
      if (r == 0) fail("{}: unexpected end of file at offset {}", path_, off);
      b += r, off += static_cast<uint64_t>(r), n -= static_cast<size_t>(r);
    }
  }
  void sync() const {
    if (::fsync(fd_) != 0) fail("{}: fsync: {}", path_, std::strerror(errno));
  }
  uint64_t allocated() const {
    struct stat st {};
    if (::fstat(fd_, &st) != 0) fail("{}: stat: {}", path_, std::strerror(errno));
    return static_cast<uint64_t>(st.st_blocks) * 512;
  }
  uint64_t size() const {
    struct stat st {};
    if (::fstat(fd_, &st) != 0) fail("{}: stat: {}", path_, std::strerror(errno));
    return static_cast<uint64_t>(st.st_size);
  }

 private:
  std::string path_;
  int fd_ = -1;
};

uint64_t hash_file(const Fd& f, const Progress& progress) {
  const uint64_t size = f.size();
  XXH64_state_t* st = XXH64_createState();
  XXH64_reset(st, 0);
  std::vector<uint8_t> buf(8u << 20);
  for (uint64_t at = 0; at < size;) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(buf.size(), size - at));
    f.read_at(buf.data(), n, at);
    XXH64_update(st, buf.data(), n);
    at += n;
    if (progress) progress("hashing " + f.path(), at, size);
  }
  const uint64_t h = XXH64_digest(st);
  XXH64_freeState(st);
  return h;
}

const gguf::TensorInfo& tensor(const gguf::File& g, int64_t il, int c) {
  const gguf::TensorInfo* t = g.find_tensor(expert_tensor_name(il, c));
  if (!t) fail("{}: missing tensor {}", g.path(), expert_tensor_name(il, c));
  return *t;
}

}  // namespace

PackReport pack_experts(const std::string& gguf_path, const std::string& packed_path, bool keep,
                        const Progress& progress) {
  PackReport rep;
  PackedManifest m;
  std::vector<uint64_t> tensor_off;  // absolute offsets, for freeing
  std::vector<uint64_t> tensor_bytes;
  {
    gguf::File g = gguf::File::open(gguf_path);
    const ExpertLayout layout = ExpertLayout::from_gguf(g);
    if (int freed = count_freed_tensors(g, layout); freed > 0)
      fail("{}: {} expert tensors are already freed (packed before); restore it first with --restore", gguf_path,
           freed);
    m = plan_packed(layout);
    m.gguf_meta_hash = gguf_meta_hash(g);
    {
      Fd gf(gguf_path, O_RDONLY);
      m.gguf_file_hash = hash_file(gf, progress);
      m.gguf_file_size = gf.size();
      rep.gguf_blocks_before = gf.allocated();
    }
    const std::string tmp = packed_path + ".tmp";
    struct Cleanup {
      std::string p;
      bool armed = true;
      ~Cleanup() {
        if (armed) std::filesystem::remove(p);
      }
    } cleanup{tmp};
    {
      Fd out(tmp, O_WRONLY | O_CREAT | O_TRUNC);
      if (::ftruncate(out.get(), static_cast<off_t>(m.file_size)) != 0)
        fail("{}: cannot size to {} bytes: {}", tmp, m.file_size, std::strerror(errno));
      const int64_t E = layout.n_expert;
      for (int64_t il = 0; il < layout.n_layer; ++il) {
        const PackedLayer& pl = m.layers[static_cast<size_t>(il)];
        const gguf::TensorInfo* t[3] = {&tensor(g, il, 0), &tensor(g, il, 1), &tensor(g, il, 2)};
        for (int c = 0; c < 3; ++c) {
          m.layers[static_cast<size_t>(il)].tensor_hash[static_cast<size_t>(c)] = XXH64(t[c]->data, t[c]->n_bytes, 0);
          tensor_off.push_back(t[c]->file_offset);
          tensor_bytes.push_back(t[c]->n_bytes);
        }
        std::vector<uint8_t> rec(pl.record_stride, 0);
        for (int64_t e = 0; e < E; ++e) {
          const uint8_t* src[3];
          for (int c = 0; c < 3; ++c) {
            const uint64_t b = pl.shape.comp[static_cast<size_t>(c)].bytes;
            src[c] = t[c]->data + static_cast<uint64_t>(e) * b;
            std::memcpy(rec.data() + pl.comp_offset[static_cast<size_t>(c)], src[c], b);
          }
          m.record_hash[static_cast<size_t>(il * E + e)] = PackedManifest::hash_record(pl.shape, src[0], src[1], src[2]);
          out.write_at(rec.data(), rec.size(), m.record_offset(il, e));
          rep.payload_bytes += pl.shape.expert_bytes();
          ++rep.experts;
        }
        if (progress) progress("packing", static_cast<uint64_t>(il + 1), static_cast<uint64_t>(layout.n_layer));
      }
      std::vector<uint8_t> prefix = encode_packed_prefix(m);
      out.write_at(prefix.data(), prefix.size(), 0);
      out.sync();
    }
    // Verify from the file system, not from memory: every record against the GGUF.
    {
      Fd in(tmp, O_RDONLY);
      PackedManifest back = read_packed_manifest(in.get(), tmp);
      if (back.manifest_hash != m.manifest_hash) fail("{}: manifest read back differs from the one written", tmp);
      const int64_t E = layout.n_expert;
      for (int64_t il = 0; il < layout.n_layer; ++il) {
        const PackedLayer& pl = back.layers[static_cast<size_t>(il)];
        std::vector<uint8_t> rec(pl.record_stride);
        for (int64_t e = 0; e < E; ++e) {
          in.read_at(rec.data(), rec.size(), back.record_offset(il, e));
          for (int c = 0; c < 3; ++c) {
            const uint64_t b = pl.shape.comp[static_cast<size_t>(c)].bytes;
            if (std::memcmp(rec.data() + pl.comp_offset[static_cast<size_t>(c)],
                            tensor(g, il, c).data + static_cast<uint64_t>(e) * b, b) != 0)
              fail("{}: verification failed: expert {} of layer {} ({}) differs from {}", tmp, e, il,
                   kComponentName[c], gguf_path);
          }
          if (PackedManifest::hash_record(pl.shape, rec.data() + pl.comp_offset[0], rec.data() + pl.comp_offset[1],
                                          rec.data() + pl.comp_offset[2]) !=
              back.record_hash[static_cast<size_t>(il * E + e)])
            fail("{}: verification failed: checksum of expert {} of layer {}", tmp, e, il);
        }
        if (progress) progress("verifying", static_cast<uint64_t>(il + 1), static_cast<uint64_t>(layout.n_layer));
      }
    }
    std::error_code ec;
    std::filesystem::rename(tmp, packed_path, ec);
    if (ec) fail("{}: cannot rename to {}: {}", tmp, packed_path, ec.message());
    cleanup.armed = false;
    rep.packed_file_bytes = m.file_size;
  }  // GGUF unmapped here
  if (keep) {
    rep.gguf_blocks_after = rep.gguf_blocks_before;
    return rep;
  }
  Fd gf(gguf_path, O_RDWR);
  for (size_t i = 0; i < tensor_off.size(); ++i) {
    if (tensor_bytes[i] < kMarkerBytes) continue;  // too small to free (kept as is)
    if (::fallocate(gf.get(), FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(tensor_off[i]),
                    static_cast<off_t>(tensor_bytes[i])) != 0)
      fail("{}: cannot free the expert range at offset {} ({}): {}; {}", gguf_path, tensor_off[i], tensor_bytes[i],
           std::strerror(errno),
           i == 0 ? "nothing was changed; use --keep-gguf-experts on this file system"
                  : "the GGUF is partly freed: run --restore");
    const auto& lay_hash = m.layers[i / 3].tensor_hash[i % 3];
    const auto marker = make_freed_marker(m.manifest_hash, lay_hash);
    gf.write_at(marker.data(), marker.size(), tensor_off[i]);
  }
  gf.sync();
  rep.freed = true;
  rep.gguf_blocks_after = gf.allocated();
  return rep;
}

PackReport restore_experts(const std::string& gguf_path, const std::string& packed_path, const Progress& progress) {
  PackReport rep;
  Fd pf(packed_path, O_RDONLY);
  const PackedManifest m = read_packed_manifest(pf.get(), packed_path);
  struct Range {
    uint64_t off, bytes, hash;
    int64_t layer;
    int c;
  };
  std::vector<Range> ranges;
  {
    gguf::File g = gguf::File::open(gguf_path);
    const ExpertLayout layout = ExpertLayout::from_gguf(g);
    check_packed_matches(m, layout, gguf_meta_hash(g), packed_path, gguf_path);
    for (int64_t il = 0; il < layout.n_layer; ++il)
      for (int c = 0; c < 3; ++c) {
        const auto& t = tensor(g, il, c);
        ranges.push_back({t.file_offset, t.n_bytes, m.layers[static_cast<size_t>(il)].tensor_hash[static_cast<size_t>(c)],
                          il, c});
      }
  }
  // Check every tensor's bytes in the packed file before writing anything into the GGUF.
  {
    for (const Range& r : ranges) {
      const PackedLayer& pl = m.layers[static_cast<size_t>(r.layer)];
      const uint64_t b = pl.shape.comp[static_cast<size_t>(r.c)].bytes;
      std::vector<uint8_t> buf(b);
      XXH64_state_t* st = XXH64_createState();
      XXH64_reset(st, 0);
      for (int64_t e = 0; e < m.n_expert; ++e) {
        pf.read_at(buf.data(), b, m.record_offset(r.layer, e) + pl.comp_offset[static_cast<size_t>(r.c)]);
        XXH64_update(st, buf.data(), b);
      }
      const uint64_t h = XXH64_digest(st);
      XXH64_freeState(st);
      if (h != r.hash)
        fail("{}: {} in {} hashes to {:016x}, expected {:016x} (packed file damaged); the GGUF was not changed",
             gguf_path, expert_tensor_name(r.layer, r.c), packed_path, h, r.hash);
      if (progress) progress("checking", static_cast<uint64_t>(&r - ranges.data() + 1), ranges.size());
    }
  }
  Fd gf(gguf_path, O_RDWR);
  rep.gguf_blocks_before = gf.allocated();
  for (const Range& r : ranges) {
    const PackedLayer& pl = m.layers[static_cast<size_t>(r.layer)];
    const uint64_t b = pl.shape.comp[static_cast<size_t>(r.c)].bytes;
    std::vector<uint8_t> buf(b);
    for (int64_t e = 0; e < m.n_expert; ++e) {
      pf.read_at(buf.data(), b, m.record_offset(r.layer, e) + pl.comp_offset[static_cast<size_t>(r.c)]);
      gf.write_at(buf.data(), b, r.off + static_cast<uint64_t>(e) * b);
      if (r.c == 0) ++rep.experts;
      rep.payload_bytes += b;
    }
    if (progress) progress("restoring", static_cast<uint64_t>(&r - ranges.data() + 1), ranges.size());
  }
  gf.sync();
  if (gf.size() != m.gguf_file_size)
    fail("{}: size {} differs from the {} bytes recorded at pack time", gguf_path, gf.size(), m.gguf_file_size);
  const uint64_t h = hash_file(gf, progress);
  if (h != m.gguf_file_hash)
    fail("{}: restored file hashes to {:016x}, the original hashed to {:016x}: it was changed after packing", gguf_path,
         h, m.gguf_file_hash);
  rep.gguf_blocks_after = gf.allocated();
  rep.packed_file_bytes = m.file_size;
  return rep;
}

}  // namespace ds4::stream
