// Safetensors parsing and validation. See safetensors.h for the checked invariants.
#include "convert/safetensors.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <limits>
#include <set>

#include "core/error.h"
#include "core/fp16.h"

namespace ds4::convert {

namespace {

struct DtypeInfo {
  StDtype type;
  std::string_view name;
  size_t size;
};

constexpr DtypeInfo kDtypes[] = {
    {StDtype::BOOL, "BOOL", 1}, {StDtype::U8, "U8", 1},     {StDtype::I8, "I8", 1},
    {StDtype::I16, "I16", 2},   {StDtype::U16, "U16", 2},   {StDtype::I32, "I32", 4},
    {StDtype::U32, "U32", 4},   {StDtype::I64, "I64", 8},   {StDtype::U64, "U64", 8},
    {StDtype::F16, "F16", 2},   {StDtype::BF16, "BF16", 2}, {StDtype::F32, "F32", 4},
    {StDtype::F64, "F64", 8},   {StDtype::F8_E4M3, "F8_E4M3", 1}, {StDtype::F8_E5M2, "F8_E5M2", 1},
    {StDtype::F8_E8M0, "F8_E8M0", 1},
};

const DtypeInfo& info(StDtype t) {
  for (const auto& d : kDtypes)
    if (d.type == t) return d;
  fail("internal: unknown safetensors dtype {}", static_cast<int>(t));
}

// A header larger than this is certainly not a model's tensor table (the reference
// implementation caps it at 100 MB too).
constexpr uint64_t kMaxHeader = 100ull << 20;

uint64_t read_u64_le(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

}  // namespace

std::string_view st_dtype_name(StDtype t) { return info(t).name; }
size_t st_dtype_size(StDtype t) { return info(t).size; }

uint64_t StTensor::n_elements() const {
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;
  return n;
}

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  SafetensorsFile f;
  f.map_ = MappedFile::open(path);
  f.path_ = path;
  f.parse_image(f.map_.bytes());
  return f;
}

SafetensorsFile SafetensorsFile::parse(std::span<const uint8_t> bytes, const std::string& name_for_errors) {
  SafetensorsFile f;
  f.path_ = name_for_errors;
  f.parse_image(bytes);
  return f;
}

const StTensor* SafetensorsFile::find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

void SafetensorsFile::parse_image(std::span<const uint8_t> bytes) {
  const std::string& p = path_;
  if (bytes.size() < 8) fail("{}: {} bytes, too short for a safetensors header length", p, bytes.size());
  const uint64_t n = read_u64_le(bytes.data());
  if (n > kMaxHeader) fail("{}: header length {} exceeds the {} byte limit", p, n, kMaxHeader);
  if (n > bytes.size() - 8) fail("{}: header length {} runs past the end of the {} byte file", p, n, bytes.size());
  std::string_view text(reinterpret_cast<const char*>(bytes.data() + 8), n);
  if (text.empty() || text.front() != '{') fail("{}: header does not start with '{{'", p);

  // Duplicate keys would silently shadow each other in nlohmann; refuse them.
  std::set<std::string> seen;
  std::string duplicate;
  nlohmann::json::parser_callback_t cb = [&](int depth, nlohmann::json::parse_event_t ev, nlohmann::json& parsed) {
    if (ev == nlohmann::json::parse_event_t::key && depth == 1) {
      auto k = parsed.get<std::string>();
      if (!seen.insert(k).second && duplicate.empty()) duplicate = k;
    }
    return true;
  };
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text.begin(), text.end(), cb);
  } catch (const nlohmann::json::exception& e) {
    fail("{}: header is not valid JSON: {}", p, e.what());
  }
  if (!header.is_object()) fail("{}: header is not a JSON object", p);
  if (!duplicate.empty()) fail("{}: header names tensor '{}' twice", p, duplicate);

  const uint64_t data_size = bytes.size() - 8 - n;
  const uint8_t* data = bytes.data() + 8 + n;
  struct Range {
    uint64_t begin, end;
    size_t index;
  };
  std::vector<Range> ranges;

  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const auto& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) fail("{}: __metadata__ is not an object", p);
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string()) fail("{}: __metadata__.{} is not a string", p, m.key());
        metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    auto where = [&](std::string_view field) { return fmt::format("{}: tensor '{}': {}", p, name, field); };
    if (!v.is_object()) fail("{} is not an object", where("entry"));
    for (auto f = v.begin(); f != v.end(); ++f)
      if (f.key() != "dtype" && f.key() != "shape" && f.key() != "data_offsets")
        fail("{} is not a known field", where(f.key()));
    if (!v.contains("dtype") || !v["dtype"].is_string()) fail("{} missing or not a string", where("dtype"));
    const std::string dt = v["dtype"].get<std::string>();
    const DtypeInfo* di = nullptr;
    for (const auto& d : kDtypes)
      if (d.name == dt) di = &d;
    if (!di) fail("{} '{}' is not a safetensors dtype", where("dtype"), dt);

    if (!v.contains("shape") || !v["shape"].is_array()) fail("{} missing or not an array", where("shape"));
    StTensor t;
    t.name = name;
    t.dtype = di->type;
    t.file = p;
    uint64_t elems = 1;
    for (const auto& d : v["shape"]) {
      if (!d.is_number_unsigned()) fail("{} holds a value that is not a non-negative integer", where("shape"));
      uint64_t x = d.get<uint64_t>();
      if (x != 0 && elems > std::numeric_limits<uint64_t>::max() / x) fail("{} element count overflows", where("shape"));
      elems *= x;
      t.shape.push_back(x);
    }
    if (!v.contains("data_offsets") || !v["data_offsets"].is_array() || v["data_offsets"].size() != 2 ||
        !v["data_offsets"][0].is_number_unsigned() || !v["data_offsets"][1].is_number_unsigned())
      fail("{} must be two non-negative integers", where("data_offsets"));
    const uint64_t b = v["data_offsets"][0].get<uint64_t>();
    const uint64_t e = v["data_offsets"][1].get<uint64_t>();
    if (b > e) fail("{} [{}, {}] ends before it begins", where("data_offsets"), b, e);
    if (e > data_size) fail("{} end {} is past the {} byte data buffer", where("data_offsets"), e, data_size);
    if (elems > std::numeric_limits<uint64_t>::max() / di->size || elems * di->size != e - b)
      fail("{} span {} bytes, but {} {} elements need {}", where("data_offsets"), e - b, elems, dt,
           elems * di->size);
    t.bytes = std::span<const uint8_t>(data + b, e - b);
    ranges.push_back({b, e, tensors_.size()});
    index_[name] = tensors_.size();
    tensors_.push_back(std::move(t));
  }

  std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t covered = 0;
  for (const auto& r : ranges) {
    if (r.begin < covered)
      fail("{}: tensor '{}' bytes [{}, {}) overlap the previous tensor", p, tensors_[r.index].name, r.begin, r.end);
    if (r.begin > covered)
      fail("{}: bytes [{}, {}) of the data buffer belong to no tensor (before '{}')", p, covered, r.begin,
           tensors_[r.index].name);
    covered = r.end;
  }
  if (covered != data_size) fail("{}: bytes [{}, {}) at the end of the data buffer belong to no tensor", p, covered, data_size);
}

void to_f32(const StTensor& t, uint64_t first, uint64_t count, float* dst) {
  if (first > t.n_elements() || count > t.n_elements() - first)
    fail("{}: tensor '{}': elements [{}, {}) out of range ({} elements)", t.file, t.name, first, first + count,
         t.n_elements());
  const uint8_t* src = t.bytes.data() + first * st_dtype_size(t.dtype);
  switch (t.dtype) {
    case StDtype::F32:
      std::memcpy(dst, src, count * 4);
      return;
    case StDtype::F16:
      for (uint64_t i = 0; i < count; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        dst[i] = fp16_to_fp32(h);
      }
      return;
    case StDtype::BF16:
      for (uint64_t i = 0; i < count; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        uint32_t w = static_cast<uint32_t>(h) << 16;
        std::memcpy(&dst[i], &w, 4);
      }
      return;
    case StDtype::F64:
      for (uint64_t i = 0; i < count; ++i) {
        double d;
        std::memcpy(&d, src + 8 * i, 8);
        dst[i] = static_cast<float>(d);
      }
      return;
    default:
      fail("{}: tensor '{}' has dtype {}, which cannot be read as float (FP8 checkpoints must be "
           "dequantized to BF16/F32 first)",
           t.file, t.name, st_dtype_name(t.dtype));
  }
}

std::vector<float> to_f32(const StTensor& t) {
  std::vector<float> out(t.n_elements());
  to_f32(t, 0, out.size(), out.data());
  return out;
}

std::vector<int64_t> to_i64(const StTensor& t) {
  const uint64_t n = t.n_elements();
  std::vector<int64_t> out(n);
  const uint8_t* s = t.bytes.data();
  auto get = [&]<class T>(T) {
    for (uint64_t i = 0; i < n; ++i) {
      T x;
      std::memcpy(&x, s + i * sizeof(T), sizeof(T));
      if constexpr (std::is_same_v<T, uint64_t>) {
        if (x > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
          fail("{}: tensor '{}': element {} = {} does not fit int64", t.file, t.name, i, x);
      }
      out[i] = static_cast<int64_t>(x);
    }
  };
  switch (t.dtype) {
    case StDtype::I64: get(int64_t{}); break;
    case StDtype::U64: get(uint64_t{}); break;
    case StDtype::I32: get(int32_t{}); break;
    case StDtype::U32: get(uint32_t{}); break;
    case StDtype::I16: get(int16_t{}); break;
    case StDtype::U16: get(uint16_t{}); break;
    case StDtype::I8: get(int8_t{}); break;
    case StDtype::U8: get(uint8_t{}); break;
    default:
      fail("{}: tensor '{}' has dtype {}, expected an integer dtype", t.file, t.name, st_dtype_name(t.dtype));
  }
  return out;
}

}  // namespace ds4::convert
