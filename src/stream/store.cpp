#include "stream/store.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "gguf/gguf.h"

namespace ds4::stream {

namespace {

uint64_t align_down(uint64_t x) { return x / kDirectAlign * kDirectAlign; }
uint64_t align_up(uint64_t x) { return (x + kDirectAlign - 1) / kDirectAlign * kDirectAlign; }

ComponentRead widen(uint64_t off, uint64_t bytes) {
  ComponentRead r;
  r.offset = align_down(off);
  r.lead = static_cast<uint32_t>(off - r.offset);
  r.need = r.lead + bytes;
  const uint64_t len = align_up(r.need);
  if (len > UINT32_MAX) fail("expert component of {} bytes is larger than one read can be", bytes);
  r.len = static_cast<uint32_t>(len);
  return r;
}

}  // namespace

ExpertStore::~ExpertStore() {
  if (fd_direct_ >= 0) ::close(fd_direct_);
  if (fd_buffered_ >= 0) ::close(fd_buffered_);
}

std::unique_ptr<ExpertStore> ExpertStore::open(const gguf::File& f, const StoreOptions& opt) {
  std::unique_ptr<ExpertStore> s(new ExpertStore);
  s->layout_ = ExpertLayout::from_gguf(f);
  const int freed = count_freed_tensors(f, s->layout_);
  std::string packed = opt.packed_path.empty() ? default_packed_path(f.path()) : opt.packed_path;
  const bool use_packed = opt.packed_path.empty() ? std::filesystem::exists(packed) : opt.packed_path != "-";
  if (!use_packed) {
    if (freed > 0)
      fail("{}: {} routed-expert tensors were moved to a packed expert file by `ds4-gguf pack-experts` "
           "(expected next to the model as {}); it is missing, so the model cannot run. Put the file back, "
           "or restore the GGUF with `ds4-gguf pack-experts --restore` from a copy of it",
           f.path(), freed, default_packed_path(f.path()));
    s->source_path_ = f.path();
  } else {
    s->source_path_ = packed;
  }
  s->fd_buffered_ = ::open(s->source_path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (s->fd_buffered_ < 0) fail("{}: cannot open: {}", s->source_path_, std::strerror(errno));
  if (opt.direct_io) {
    s->fd_direct_ = ::open(s->source_path_.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
    s->direct_ = s->fd_direct_ >= 0;
  }
  if (use_packed) {
    s->packed_ = read_packed_manifest(s->fd_buffered_, packed);
    check_packed_matches(*s->packed_, s->layout_, gguf_meta_hash(f), packed, f.path());
    if (freed > 0) {
      // The markers name the manifest they were freed for.
      for (int64_t il = 0; il < s->layout_.n_layer; ++il)
        for (int c = 0; c < 3; ++c) {
          const gguf::TensorInfo* t = f.find_tensor(expert_tensor_name(il, c));
          uint64_t mh = 0;
          if (is_freed_marker({t->data, static_cast<size_t>(t->n_bytes)}, &mh) && mh != s->packed_->manifest_hash)
            fail("{}: tensor {} was freed for a different packed file than {}", f.path(), t->name, packed);
        }
    }
  }
  return s;
}

ComponentRead ExpertStore::component(int64_t layer, int64_t e, int c) const {
  const ComponentShape& cs = layout_.layers[static_cast<size_t>(layer)].comp[static_cast<size_t>(c)];
  if (packed_)
    return widen(packed_->record_offset(layer, e) + packed_->layers[static_cast<size_t>(layer)].comp_offset[static_cast<size_t>(c)],
                 cs.bytes);
  return widen(layout_.gguf_offset[static_cast<size_t>(layer)][static_cast<size_t>(c)] +
                   static_cast<uint64_t>(e) * cs.bytes,
               cs.bytes);
}

ComponentRead ExpertStore::record(int64_t layer, int64_t e) const {
  if (!packed_) fail("internal: whole-record reads need a packed expert file");
  const PackedLayer& pl = packed_->layers[static_cast<size_t>(layer)];
  return widen(packed_->record_offset(layer, e), pl.comp_offset[2] + pl.shape.comp[2].bytes);
}

uint64_t ExpertStore::record_comp_offset(int64_t layer, int c) const {
  return packed_ ? packed_->layers[static_cast<size_t>(layer)].comp_offset[static_cast<size_t>(c)] : 0;
}

uint64_t ExpertStore::slot_bytes_split(int64_t layer) const {
  uint64_t s = 0;
  for (int c = 0; c < 3; ++c)
    s += align_up(layout_.layers[static_cast<size_t>(layer)].comp[static_cast<size_t>(c)].bytes + kDirectAlign - 1);
  return s;
}

uint64_t ExpertStore::slot_bytes_record(int64_t layer) const {
  if (!packed_) return slot_bytes_split(layer);
  return align_up(packed_->layers[static_cast<size_t>(layer)].record_stride);
}

bool ExpertStore::verify(int64_t layer, int64_t e, const uint8_t* gate, const uint8_t* up, const uint8_t* down) const {
  if (!packed_) return true;
  const uint64_t want = packed_->record_hash[static_cast<size_t>(layer * layout_.n_expert + e)];
  return PackedManifest::hash_record(layout_.layers[static_cast<size_t>(layer)], gate, up, down) == want;
}

}  // namespace ds4::stream
