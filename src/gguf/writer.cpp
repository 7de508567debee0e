// Streaming GGUF v3 writer. Metadata and tensor infos are held in memory (they are small);
// tensor bytes go straight to "<path>.tmp", which becomes <path> only when finish() succeeds.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <unordered_set>

#include <sys/types.h>
#include <unistd.h>

#include "core/error.h"
#include "gguf/format.h"
#include "gguf/gguf.h"

namespace ds4::gguf {

using namespace detail;

namespace {

// Checks that a Value is encodable exactly as its declared type (Values can be built by hand).
void check_value(const Value& v, uint32_t depth, const std::string& where) {
  auto holds = [&](bool ok) {
    if (!ok) fail("{}: value declared {} holds a different C++ type", where, value_type_name(v.type));
  };
  auto fits_u = [&](uint64_t max) {
    holds(std::holds_alternative<uint64_t>(v.v));
    if (std::get<uint64_t>(v.v) > max) fail("{}: {} value {} out of range", where, value_type_name(v.type), std::get<uint64_t>(v.v));
  };
  auto fits_i = [&](int64_t lo, int64_t hi) {
    holds(std::holds_alternative<int64_t>(v.v));
    int64_t x = std::get<int64_t>(v.v);
    if (x < lo || x > hi) fail("{}: {} value {} out of range", where, value_type_name(v.type), x);
  };
  switch (v.type) {
    case ValueType::U8: fits_u(0xff); break;
    case ValueType::U16: fits_u(0xffff); break;
    case ValueType::U32: fits_u(0xffffffffu); break;
    case ValueType::U64: fits_u(std::numeric_limits<uint64_t>::max()); break;
    case ValueType::I8: fits_i(-128, 127); break;
    case ValueType::I16: fits_i(-32768, 32767); break;
    case ValueType::I32: fits_i(std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max()); break;
    case ValueType::I64: fits_i(std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()); break;
    case ValueType::F32: case ValueType::F64: holds(std::holds_alternative<double>(v.v)); break;
    case ValueType::BOOL: holds(std::holds_alternative<bool>(v.v)); break;
    case ValueType::STRING: holds(std::holds_alternative<std::string>(v.v)); break;
    case ValueType::ARRAY: {
      holds(std::holds_alternative<Array>(v.v));
      if (depth + 1 > Limits::max_array_depth)
        fail("{}: arrays nested deeper than {} levels", where, Limits::max_array_depth);
      const auto& a = std::get<Array>(v.v);
      if (!valid_value_type(static_cast<uint32_t>(a.elem_type)))
        fail("{}: invalid array element type {}", where, static_cast<uint32_t>(a.elem_type));
      for (size_t i = 0; i < a.items.size(); ++i) {
        if (a.items[i].type != a.elem_type)
          fail("{}: array of {} has item {} of type {}", where, value_type_name(a.elem_type), i,
               value_type_name(a.items[i].type));
        check_value(a.items[i], depth + 1, where);
      }
      break;
    }
    default: fail("{}: invalid value type {}", where, static_cast<uint32_t>(v.type));
  }
}

// Appends the little-endian encoding of values to a byte buffer.
class Encoder {
 public:
  std::vector<uint8_t> out;

  template <class T>
  void put(T x) {
    uint8_t b[sizeof(T)];
    std::memcpy(b, &x, sizeof(T));
    out.insert(out.end(), b, b + sizeof(T));
  }
  void put_string(const std::string& s) {
    put<uint64_t>(s.size());
    out.insert(out.end(), s.begin(), s.end());
  }
  void put_value_payload(const Value& v) {
    switch (v.type) {
      case ValueType::U8: put<uint8_t>(static_cast<uint8_t>(std::get<uint64_t>(v.v))); break;
      case ValueType::U16: put<uint16_t>(static_cast<uint16_t>(std::get<uint64_t>(v.v))); break;
      case ValueType::U32: put<uint32_t>(static_cast<uint32_t>(std::get<uint64_t>(v.v))); break;
      case ValueType::U64: put<uint64_t>(std::get<uint64_t>(v.v)); break;
      case ValueType::I8: put<int8_t>(static_cast<int8_t>(std::get<int64_t>(v.v))); break;
      case ValueType::I16: put<int16_t>(static_cast<int16_t>(std::get<int64_t>(v.v))); break;
      case ValueType::I32: put<int32_t>(static_cast<int32_t>(std::get<int64_t>(v.v))); break;
      case ValueType::I64: put<int64_t>(std::get<int64_t>(v.v)); break;
      case ValueType::F32: put<float>(static_cast<float>(std::get<double>(v.v))); break;
      case ValueType::F64: put<double>(std::get<double>(v.v)); break;
      case ValueType::BOOL: put<uint8_t>(std::get<bool>(v.v) ? 1 : 0); break;
      case ValueType::STRING: put_string(std::get<std::string>(v.v)); break;
      case ValueType::ARRAY: {
        const auto& a = std::get<Array>(v.v);
        put<uint32_t>(static_cast<uint32_t>(a.elem_type));
        put<uint64_t>(a.items.size());
        for (const auto& item : a.items) put_value_payload(item);
        break;
      }
    }
  }
  void pad_to(uint64_t base, uint64_t alignment) {
    while ((base + out.size()) % alignment != 0) out.push_back(0);
  }
};

}  // namespace

struct Writer::Impl {
  enum class State { Declaring, Data, Finished, Failed };

  std::string path;
  std::string tmp_path;
  FILE* file = nullptr;
  State state = State::Declaring;
  uint32_t alignment = kDefaultAlignment;
  std::vector<KeyValue> kvs;
  std::unordered_set<std::string> keys;
  std::vector<TensorInfo> tensors;
  std::unordered_set<std::string> names;
  uint64_t next_offset = 0;   // data-section offset of the next declared tensor
  size_t current = 0;         // tensor being streamed
  uint64_t current_written = 0;
  uint64_t position = 0;      // bytes written to the file so far

  template <class... Args>
  [[noreturn]] void error(fmt::format_string<Args...> f, Args&&... args) {
    std::string msg = fmt::format("{}: {}", path, fmt::format(f, std::forward<Args>(args)...));
    abandon();
    throw Error(msg);
  }

  // Drops the temporary file; the Writer cannot be used afterwards.
  void abandon() {
    if (file) {
      std::fclose(file);
      file = nullptr;
    }
    if (state == State::Data) std::remove(tmp_path.c_str());
    state = State::Failed;
  }

  void write_bytes(const void* p, size_t n) {
    if (n == 0) return;
    if (std::fwrite(p, 1, n, file) != n) error("write to {} failed: {}", tmp_path, std::strerror(errno));
    position += n;
  }

  void write_padding() {
    static constexpr uint8_t zeros[256] = {};
    while (position % alignment != 0) {
      uint64_t n = std::min<uint64_t>(sizeof(zeros), alignment - position % alignment);
      write_bytes(zeros, n);
    }
  }

  // Moves past tensors that are complete (including zero remaining bytes) and pads after each.
  void advance_completed() {
    while (current < tensors.size() && current_written == tensors[current].n_bytes) {
      write_padding();
      ++current;
      current_written = 0;
    }
  }

  void require(State s, const char* op) {
    if (state == s) return;
    const char* now = state == State::Declaring ? "before write_header()"
                      : state == State::Data   ? "after write_header()"
                      : state == State::Finished ? "after finish()"
                                                 : "after an earlier error";
    throw Error(fmt::format("{}: {} called {}", path, op, now));
  }
};

Writer::Writer(std::string path) : impl_(std::make_unique<Impl>()) {
  impl_->path = std::move(path);
  impl_->tmp_path = impl_->path + ".tmp";
}

Writer::~Writer() {
  if (impl_ && impl_->state != Impl::State::Finished) impl_->abandon();
}

void Writer::add_kv(std::string key, Value value) {
  auto& w = *impl_;
  w.require(Impl::State::Declaring, "add_kv");
  if (key.empty()) w.error("metadata key is empty");
  if (w.keys.count(key)) w.error("duplicate metadata key '{}'", key);
  try {
    check_value(value, 0, fmt::format("{}: key '{}'", w.path, key));
  } catch (const Error&) {
    w.abandon();
    throw;
  }
  if (key == kAlignmentKey) {
    if (value.type != ValueType::U32) w.error("{} must be u32, got {}", kAlignmentKey, describe_type(value));
    uint64_t a = std::get<uint64_t>(value.v);
    if (!is_power_of_two(a)) w.error("{} is {}, must be a nonzero power of two", kAlignmentKey, a);
    if (!w.tensors.empty()) w.error("set {} before adding tensors", kAlignmentKey);
    w.alignment = static_cast<uint32_t>(a);
  }
  w.keys.insert(key);
  w.kvs.push_back({std::move(key), std::move(value)});
}

void Writer::add_tensor(std::string name, GgmlType type, std::vector<uint64_t> ne) {
  auto& w = *impl_;
  w.require(Impl::State::Declaring, "add_tensor");
  if (name.empty()) w.error("tensor name is empty");
  if (name.size() > Limits::max_tensor_name)
    w.error("tensor name '{}' is {} bytes, longer than {}", name, name.size(), Limits::max_tensor_name);
  if (w.names.count(name)) w.error("duplicate tensor name '{}'", name);
  if (ne.empty() || ne.size() > kMaxDims) w.error("tensor '{}': {} dims, must be 1..{}", name, ne.size(), kMaxDims);
  auto tr = type_traits(static_cast<uint32_t>(type));
  if (!tr) w.error("tensor '{}': unknown ggml type id {}", name, static_cast<uint32_t>(type));
  uint64_t n = 1;
  for (uint64_t d : ne) {
    if (d == 0) w.error("tensor '{}': a dimension is 0", name);
    if (__builtin_mul_overflow(n, d, &n) || n > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      w.error("tensor '{}': element count overflows int64", name);
  }
  if (ne[0] % tr->block_elems != 0)
    w.error("tensor '{}': ne0 = {} is not a multiple of the {} block size {}", name, ne[0], tr->name,
            tr->block_elems);
  TensorInfo t;
  t.name = std::move(name);
  t.type = type;
  t.ne = std::move(ne);
  uint64_t padded = 0;
  if (__builtin_mul_overflow(n / tr->block_elems, uint64_t{tr->block_bytes}, &t.n_bytes) ||
      !align_up(t.n_bytes, w.alignment) || __builtin_add_overflow(w.next_offset, *align_up(t.n_bytes, w.alignment), &padded))
    w.error("tensor '{}': size overflows", t.name);
  t.offset = w.next_offset;
  w.next_offset = padded;
  w.names.insert(t.name);
  w.tensors.push_back(std::move(t));
}

void Writer::write_header() {
  auto& w = *impl_;
  w.require(Impl::State::Declaring, "write_header");
  Encoder e;
  e.put<uint32_t>(kMagic);
  e.put<uint32_t>(kVersion);
  e.put<uint64_t>(w.tensors.size());
  e.put<uint64_t>(w.kvs.size());
  for (const auto& kv : w.kvs) {
    e.put_string(kv.key);
    e.put<uint32_t>(static_cast<uint32_t>(kv.value.type));
    e.put_value_payload(kv.value);
  }
  for (const auto& t : w.tensors) {
    e.put_string(t.name);
    e.put<uint32_t>(static_cast<uint32_t>(t.ne.size()));
    for (uint64_t d : t.ne) e.put<uint64_t>(d);
    e.put<uint32_t>(static_cast<uint32_t>(t.type));
    e.put<uint64_t>(t.offset);
  }
  e.pad_to(0, w.alignment);  // ggml pads here even without tensors

  w.file = std::fopen(w.tmp_path.c_str(), "wb");
  if (!w.file) w.error("cannot create {}: {}", w.tmp_path, std::strerror(errno));
  w.state = Impl::State::Data;
  std::setvbuf(w.file, nullptr, _IOFBF, 1 << 20);
  w.write_bytes(e.out.data(), e.out.size());
  w.advance_completed();
}

void Writer::write_tensor_data(std::span<const uint8_t> bytes) {
  auto& w = *impl_;
  w.require(Impl::State::Data, "write_tensor_data");
  while (!bytes.empty()) {
    if (w.current >= w.tensors.size())
      w.error("write_tensor_data: {} bytes beyond the last declared tensor", bytes.size());
    const auto& t = w.tensors[w.current];
    uint64_t n = std::min<uint64_t>(bytes.size(), t.n_bytes - w.current_written);
    w.write_bytes(bytes.data(), n);
    w.current_written += n;
    bytes = bytes.subspan(n);
    w.advance_completed();
  }
}

void Writer::skip_tensor_data(uint64_t n) {
  auto& w = *impl_;
  w.require(Impl::State::Data, "skip_tensor_data");
  while (n > 0) {
    if (w.current >= w.tensors.size()) w.error("skip_tensor_data: {} bytes beyond the last declared tensor", n);
    const auto& t = w.tensors[w.current];
    uint64_t k = std::min<uint64_t>(n, t.n_bytes - w.current_written);
    if (k > static_cast<uint64_t>(std::numeric_limits<off_t>::max()) ||
        std::fflush(w.file) != 0 || fseeko(w.file, static_cast<off_t>(k), SEEK_CUR) != 0)
      w.error("seek in {} failed: {}", w.tmp_path, std::strerror(errno));
    w.position += k;
    w.current_written += k;
    n -= k;
    w.advance_completed();
  }
}

void Writer::finish() {
  auto& w = *impl_;
  if (w.state == Impl::State::Declaring) write_header();
  w.require(Impl::State::Data, "finish");
  if (w.current < w.tensors.size())
    w.error("finish: tensor '{}' has {} of {} bytes written", w.tensors[w.current].name, w.current_written,
            w.tensors[w.current].n_bytes);
  if (std::fflush(w.file) != 0) w.error("write to {} failed: {}", w.tmp_path, std::strerror(errno));
  // A trailing skip_tensor_data() hole does not extend the file by itself.
  if (ftruncate(fileno(w.file), static_cast<off_t>(w.position)) != 0)
    w.error("cannot size {}: {}", w.tmp_path, std::strerror(errno));
  int rc = std::fclose(w.file);
  w.file = nullptr;
  if (rc != 0) w.error("closing {} failed: {}", w.tmp_path, std::strerror(errno));
  if (std::rename(w.tmp_path.c_str(), w.path.c_str()) != 0)
    w.error("cannot rename {} to {}: {}", w.tmp_path, w.path, std::strerror(errno));
  w.state = Impl::State::Finished;
}

}  // namespace ds4::gguf
