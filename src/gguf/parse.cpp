// GGUF v3 validation and decoding. Everything is checked before it is used: counts are bounded
// by the bytes left before any allocation, and tensor extents are proven to lie inside the file.
#include <algorithm>
#include <limits>
#include <numeric>
#include <unordered_map>

#include "gguf/byte_cursor.h"
#include "gguf/file_impl.h"
#include "gguf/format.h"

namespace ds4::gguf::detail {
namespace {

class Parser {
 public:
  explicit Parser(File::Impl& impl) : f_(impl), c_(impl.bytes, impl.path) {}

  void run() {
    read_header();
    read_metadata();
    read_alignment();
    read_tensor_infos();
    place_tensors();
    build_indexes();
  }

 private:
  void read_header() {
    if (c_.size() < 4) c_.fail_at(0, "file too short for the GGUF magic ({} bytes)", c_.size());
    uint32_t magic = c_.read<uint32_t>("magic");
    if (magic != kMagic) c_.fail_at(0, "bad magic 0x{:08x}, expected 0x{:08x} (\"GGUF\")", magic, kMagic);
    f_.version = c_.read<uint32_t>("version");
    if (f_.version != kVersion)
      c_.fail_at(4, "unsupported GGUF version {} (only version {} is supported)", f_.version, kVersion);
    n_tensors_ = c_.read<uint64_t>("tensor count");
    n_kv_ = c_.read<uint64_t>("metadata count");
    // Each entry takes at least a few bytes, so a count the rest of the file cannot hold is
    // rejected before anything is reserved.
    if (n_kv_ > c_.remaining() / kMinKvBytes)
      c_.fail_at(16, "metadata count {} cannot fit in the {} bytes left", n_kv_, c_.remaining());
    if (n_tensors_ > c_.remaining() / kMinTensorInfoBytes)
      c_.fail_at(8, "tensor count {} cannot fit in the {} bytes left", n_tensors_, c_.remaining());
  }

  void read_metadata() {
    f_.metadata.reserve(n_kv_);
    f_.kv_offsets.reserve(n_kv_);
    std::unordered_map<std::string, uint64_t> seen;
    for (uint64_t i = 0; i < n_kv_; ++i) {
      uint64_t at = c_.pos();
      std::string key = read_counted_string("metadata key");
      if (key.empty()) c_.fail_at(at, "metadata key {} is empty", i);
      auto [it, fresh] = seen.emplace(key, at);
      if (!fresh) c_.fail_at(at, "duplicate metadata key '{}' (first at offset {})", key, it->second);
      uint64_t type_at = c_.pos();
      uint32_t type = c_.read<uint32_t>("value type");
      if (!valid_value_type(type)) c_.fail_at(type_at, "key '{}': unknown value type {}", key, type);
      Value v = read_value(static_cast<ValueType>(type), 0, key);
      f_.metadata.push_back({std::move(key), std::move(v)});
      f_.kv_offsets.push_back(at);
    }
  }

  // Strings count against a total budget, checked before the bytes are copied.
  std::string read_counted_string(const char* what) {
    std::string s = c_.read_string(what, Limits::max_metadata_string_bytes - string_bytes_);
    string_bytes_ += s.size();
    return s;
  }

  Value read_value(ValueType t, uint32_t depth, const std::string& key) {
    Value v;
    v.type = t;
    uint64_t at = c_.pos();
    switch (t) {
      case ValueType::U8: v.v = uint64_t{c_.read<uint8_t>("u8 value")}; break;
      case ValueType::I8: v.v = int64_t{c_.read<int8_t>("i8 value")}; break;
      case ValueType::U16: v.v = uint64_t{c_.read<uint16_t>("u16 value")}; break;
      case ValueType::I16: v.v = int64_t{c_.read<int16_t>("i16 value")}; break;
      case ValueType::U32: v.v = uint64_t{c_.read<uint32_t>("u32 value")}; break;
      case ValueType::I32: v.v = int64_t{c_.read<int32_t>("i32 value")}; break;
      case ValueType::U64: v.v = c_.read<uint64_t>("u64 value"); break;
      case ValueType::I64: v.v = c_.read<int64_t>("i64 value"); break;
      case ValueType::F32: v.v = double{c_.read<float>("f32 value")}; break;
      case ValueType::F64: v.v = c_.read<double>("f64 value"); break;
      case ValueType::BOOL: {
        uint8_t b = c_.read<uint8_t>("bool value");
        if (b > 1) c_.fail_at(at, "key '{}': bool byte is {}, must be 0 or 1", key, b);
        v.v = b == 1;
        break;
      }
      case ValueType::STRING: v.v = read_counted_string("string value"); break;
      case ValueType::ARRAY: v.v = read_array(depth + 1, key); break;
    }
    return v;
  }

  Array read_array(uint32_t depth, const std::string& key) {
    uint64_t at = c_.pos();
    if (depth > Limits::max_array_depth)
      c_.fail_at(at, "key '{}': arrays nested deeper than {} levels", key, Limits::max_array_depth);
    uint32_t et = c_.read<uint32_t>("array element type");
    if (!valid_value_type(et)) c_.fail_at(at, "key '{}': unknown array element type {}", key, et);
    Array a;
    a.elem_type = static_cast<ValueType>(et);
    uint64_t count_at = c_.pos();
    uint64_t n = c_.read<uint64_t>("array count");
    uint64_t min_size = min_element_size(a.elem_type);
    if (n > c_.remaining() / min_size)
      c_.fail_at(count_at, "key '{}': array of {} {} elements cannot fit in the {} bytes left", key, n,
                 value_type_name(a.elem_type), c_.remaining());
    if (n > Limits::max_metadata_items - items_)
      c_.fail_at(count_at, "key '{}': array of {} elements exceeds the limit of {} metadata array items", key,
                 n, Limits::max_metadata_items);
    items_ += n;
    a.items.reserve(n);
    for (uint64_t i = 0; i < n; ++i) a.items.push_back(read_value(a.elem_type, depth, key));
    return a;
  }

  void read_alignment() {
    f_.alignment = kDefaultAlignment;
    for (size_t i = 0; i < f_.metadata.size(); ++i) {
      const auto& kv = f_.metadata[i];
      if (kv.key != kAlignmentKey) continue;
      if (kv.value.type != ValueType::U32)
        c_.fail_at(f_.kv_offsets[i], "{} must be u32, found {}", kAlignmentKey, describe_type(kv.value));
      uint64_t a = std::get<uint64_t>(kv.value.v);
      if (!is_power_of_two(a))
        c_.fail_at(f_.kv_offsets[i], "{} is {}, must be a nonzero power of two", kAlignmentKey, a);
      f_.alignment = static_cast<uint32_t>(a);
    }
  }

  void read_tensor_infos() {
    if (n_tensors_ > c_.remaining() / kMinTensorInfoBytes)
      c_.fail_at(8, "tensor count {} cannot fit in the {} bytes left after the metadata", n_tensors_,
                 c_.remaining());
    f_.tensors.reserve(n_tensors_);
    offset_field_at_.reserve(n_tensors_);
    std::unordered_map<std::string, uint64_t> seen;
    for (uint64_t i = 0; i < n_tensors_; ++i) {
      TensorInfo t;
      uint64_t at = c_.pos();
      t.name = c_.read_string("tensor name", Limits::max_tensor_name);
      if (t.name.empty()) c_.fail_at(at, "tensor {} has an empty name", i);
      auto [it, fresh] = seen.emplace(t.name, at);
      if (!fresh) c_.fail_at(at, "duplicate tensor name '{}' (first at offset {})", t.name, it->second);

      uint64_t dims_at = c_.pos();
      uint32_t n_dims = c_.read<uint32_t>("n_dims");
      if (n_dims < 1 || n_dims > kMaxDims)
        c_.fail_at(dims_at, "tensor '{}': n_dims is {}, must be 1..{}", t.name, n_dims, kMaxDims);
      uint64_t n_elements = 1;
      for (uint32_t d = 0; d < n_dims; ++d) {
        uint64_t ne_at = c_.pos();
        uint64_t ne = c_.read<uint64_t>("dimension");
        if (ne == 0) c_.fail_at(ne_at, "tensor '{}': dimension {} is 0", t.name, d);
        // ggml stores dims and element counts as int64_t.
        if (__builtin_mul_overflow(n_elements, ne, &n_elements) ||
            n_elements > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
          c_.fail_at(ne_at, "tensor '{}': element count overflows int64 at dimension {} ({})", t.name, d, ne);
        t.ne.push_back(ne);
      }

      uint64_t type_at = c_.pos();
      uint32_t type_id = c_.read<uint32_t>("tensor type");
      auto tr = type_traits(type_id);
      if (!tr) c_.fail_at(type_at, "tensor '{}': unknown or unsupported ggml type id {}", t.name, type_id);
      t.type = tr->type;
      if (t.ne[0] % tr->block_elems != 0)
        c_.fail_at(dims_at + 4, "tensor '{}': ne0 = {} is not a multiple of the {} block size {}", t.name, t.ne[0],
                   tr->name, tr->block_elems);
      uint64_t blocks = n_elements / tr->block_elems;
      if (__builtin_mul_overflow(blocks, uint64_t{tr->block_bytes}, &t.n_bytes))
        c_.fail_at(dims_at, "tensor '{}': byte size overflows", t.name);

      uint64_t off_at = c_.pos();
      t.offset = c_.read<uint64_t>("tensor data offset");
      if (t.offset % f_.alignment != 0)
        c_.fail_at(off_at, "tensor '{}': data offset {} is not a multiple of the alignment {}", t.name, t.offset,
                   f_.alignment);
      f_.tensors.push_back(std::move(t));
      offset_field_at_.push_back(off_at);
    }
  }

  void place_tensors() {
    uint64_t end_of_infos = c_.pos();
    if (f_.tensors.empty()) {
      // As ggml: the data section is only padded when there is data.
      f_.data_offset = end_of_infos;
      return;
    }
    auto start = align_up(end_of_infos, f_.alignment);
    if (!start || *start > c_.size())
      c_.fail_at(end_of_infos, "data section (aligned to {}) starts past the end of the file ({} bytes)",
                 f_.alignment, c_.size());
    f_.data_offset = *start;
    uint64_t data_bytes = c_.size() - f_.data_offset;
    for (size_t i = 0; i < f_.tensors.size(); ++i) {
      auto& t = f_.tensors[i];
      if (t.offset > data_bytes || t.n_bytes > data_bytes - t.offset)
        c_.fail_at(offset_field_at_[i],
                   "tensor '{}': {} bytes at data offset {} run past the end of the file (data section starts at "
                   "{}, file is {} bytes)",
                   t.name, t.n_bytes, t.offset, f_.data_offset, c_.size());
      t.file_offset = f_.data_offset + t.offset;
      t.data = f_.bytes.data() + t.file_offset;
    }
    std::vector<size_t> order(f_.tensors.size());
    std::iota(order.begin(), order.end(), size_t{0});
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return f_.tensors[a].offset != f_.tensors[b].offset ? f_.tensors[a].offset < f_.tensors[b].offset : a < b;
    });
    for (size_t k = 1; k < order.size(); ++k) {
      const auto& prev = f_.tensors[order[k - 1]];
      const auto& cur = f_.tensors[order[k]];
      if (prev.offset + prev.n_bytes > cur.offset) {
        // Report whichever of the two was declared later.
        size_t later = std::max(order[k - 1], order[k]);
        const auto& a = f_.tensors[std::min(order[k - 1], order[k])];
        const auto& b = f_.tensors[later];
        c_.fail_at(offset_field_at_[later], "tensor '{}': data [{}, {}) overlaps tensor '{}' [{}, {})", b.name,
                   b.offset, b.offset + b.n_bytes, a.name, a.offset, a.offset + a.n_bytes);
      }
    }
  }

  void build_indexes() {
    f_.key_index.reserve(f_.metadata.size());
    for (size_t i = 0; i < f_.metadata.size(); ++i) f_.key_index.emplace(f_.metadata[i].key, i);
    f_.tensor_index.reserve(f_.tensors.size());
    for (size_t i = 0; i < f_.tensors.size(); ++i) f_.tensor_index.emplace(f_.tensors[i].name, i);
  }

  File::Impl& f_;
  ByteCursor c_;
  uint64_t n_tensors_ = 0;
  uint64_t n_kv_ = 0;
  uint64_t items_ = 0;         // array elements decoded so far
  uint64_t string_bytes_ = 0;  // key and string bytes copied so far
  std::vector<uint64_t> offset_field_at_;
};

}  // namespace

void parse_into(File::Impl& impl) { Parser(impl).run(); }

}  // namespace ds4::gguf::detail
