// `ds4-gguf inspect FILE [--json]`: header, metadata and tensor table of a GGUF file.
// Text mode abbreviates long arrays and strings; --json prints everything.
#include <cstdio>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "command.h"
#include "core/error.h"
#include "gguf/gguf.h"

namespace {

using ds4::gguf::Value;
using ds4::gguf::ValueType;

constexpr size_t kShownItems = 8;     // array items shown in text mode
constexpr size_t kShownChars = 120;   // string bytes shown in text mode

// Quoted, with control characters escaped so one value stays on one line.
std::string quoted(const std::string& s, size_t limit) {
  std::string out = "\"";
  for (size_t i = 0; i < s.size() && i < limit; ++i) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == '"' || c == '\\') out += {'\\', static_cast<char>(c)};
    else if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20 || c == 0x7f) out += fmt::format("\\x{:02x}", c);
    else out += static_cast<char>(c);
  }
  out += "\"";
  if (s.size() > limit) out += fmt::format("... ({} bytes)", s.size());
  return out;
}

std::string text(const Value& v) {
  switch (v.type) {
    case ValueType::F32: return fmt::format("{}", static_cast<float>(std::get<double>(v.v)));
    case ValueType::F64: return fmt::format("{}", std::get<double>(v.v));
    case ValueType::BOOL: return std::get<bool>(v.v) ? "true" : "false";
    case ValueType::STRING: return quoted(std::get<std::string>(v.v), kShownChars);
    case ValueType::ARRAY: {
      const auto& a = std::get<ds4::gguf::Array>(v.v);
      std::string out = "[";
      for (size_t i = 0; i < a.items.size() && i < kShownItems; ++i) out += (i ? ", " : "") + text(a.items[i]);
      if (a.items.size() > kShownItems) out += fmt::format(", ... {} more", a.items.size() - kShownItems);
      return out + "]";
    }
    default:
      if (const auto* u = std::get_if<uint64_t>(&v.v)) return fmt::format("{}", *u);
      return fmt::format("{}", std::get<int64_t>(v.v));
  }
}

std::string type_text(const Value& v) {
  if (v.type != ValueType::ARRAY) return ds4::gguf::describe_type(v);
  return fmt::format("{}({})", ds4::gguf::describe_type(v), std::get<ds4::gguf::Array>(v.v).items.size());
}

std::string shape_text(const std::vector<uint64_t>& ne) { return fmt::format("[{}]", fmt::join(ne, ", ")); }

nlohmann::ordered_json json(const Value& v) {
  switch (v.type) {
    case ValueType::F32: case ValueType::F64: return std::get<double>(v.v);
    case ValueType::BOOL: return std::get<bool>(v.v);
    case ValueType::STRING: return std::get<std::string>(v.v);
    case ValueType::ARRAY: {
      const auto& a = std::get<ds4::gguf::Array>(v.v);
      auto items = nlohmann::ordered_json::array();
      for (const auto& item : a.items) items.push_back(json(item));
      return {{"elem_type", ds4::gguf::value_type_name(a.elem_type)}, {"items", std::move(items)}};
    }
    default:
      if (const auto* u = std::get_if<uint64_t>(&v.v)) return *u;
      return std::get<int64_t>(v.v);
  }
}

void print_text(const ds4::gguf::File& f) {
  fmt::print("{}: GGUF v{}, {} bytes, alignment {}, data section at offset {}\n", f.path(), f.version(),
             f.file_size(), f.alignment(), f.data_offset());
  size_t key_w = 0;
  for (const auto& kv : f.metadata()) key_w = std::max(key_w, kv.key.size());
  fmt::print("\nmetadata: {} keys\n", f.metadata().size());
  for (const auto& kv : f.metadata())
    fmt::print("  {:<{}}  {:<18} {}\n", kv.key, key_w, type_text(kv.value), text(kv.value));
  size_t name_w = 4;
  for (const auto& t : f.tensors()) name_w = std::max(name_w, t.name.size());
  fmt::print("\ntensors: {} (offset = absolute file offset)\n", f.tensors().size());
  fmt::print("  {:<{}}  {:<8} {:<24} {:>12} {:>12}\n", "name", name_w, "type", "shape", "offset", "bytes");
  for (const auto& t : f.tensors())
    fmt::print("  {:<{}}  {:<8} {:<24} {:>12} {:>12}\n", t.name, name_w, ds4::traits(t.type).name, shape_text(t.ne),
               t.file_offset, t.n_bytes);
}

void print_json(const ds4::gguf::File& f) {
  nlohmann::ordered_json j;
  j["file"] = f.path();
  j["file_size"] = f.file_size();
  j["version"] = f.version();
  j["alignment"] = f.alignment();
  j["data_offset"] = f.data_offset();
  auto md = nlohmann::ordered_json::array();
  for (const auto& kv : f.metadata())
    md.push_back({{"key", kv.key}, {"type", ds4::gguf::value_type_name(kv.value.type)}, {"value", json(kv.value)}});
  j["metadata"] = std::move(md);
  auto ts = nlohmann::ordered_json::array();
  for (const auto& t : f.tensors())
    ts.push_back({{"name", t.name},
                  {"type", ds4::traits(t.type).name},
                  {"type_id", static_cast<uint32_t>(t.type)},
                  {"shape", t.ne},
                  {"offset", t.offset},
                  {"file_offset", t.file_offset},
                  {"bytes", t.n_bytes}});
  j["tensors"] = std::move(ts);
  // Invalid UTF-8 in a string is replaced (U+FFFD) rather than aborting the dump.
  fmt::print("{}\n", j.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace));
}

int cmd_inspect(int argc, char** argv) {
  std::string path;
  bool as_json = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--json") as_json = true;
    else if (!a.empty() && a[0] == '-') ds4::fail("unknown option '{}' (usage: inspect FILE [--json])", a);
    else if (path.empty()) path = a;
    else ds4::fail("more than one FILE given (usage: inspect FILE [--json])");
  }
  if (path.empty()) ds4::fail("missing FILE (usage: inspect FILE [--json])");
  auto f = ds4::gguf::File::open(path);
  if (as_json) print_json(f);
  else print_text(f);
  return 0;
}

const bool registered = ds4::tools::register_command(
    {"inspect", "FILE [--json]   print header, metadata and tensor table", cmd_inspect});

}  // namespace
