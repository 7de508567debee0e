// `ds4-gguf tokenize -m FILE.gguf [--special] --jsonl IN`: one JSON value per input line (a
// string, or an object with "text", or with "b64" for arbitrary bytes), one JSON array of
// token ids per output line. No BOS is added. --special recognises added/special tokens, as
// HF tokenizers' encode() does by default; without it all text is ordinary text.
// IN may be "-" for stdin. Blank lines are skipped. A line that cannot be read (bad JSON, lone
// surrogate escapes, wrong shape) prints `null` so output stays aligned with input; its error
// goes to stderr and the command exits with status 1 after the last line.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "command.h"
#include "core/error.h"
#include "ds4/tokenizer.h"

namespace {

constexpr const char* kUsage = "usage: tokenize -m FILE.gguf [--special] --jsonl IN|-";

std::string base64_decode(const std::string& in, size_t line_no) {
  std::string out;
  uint32_t val = 0;
  int bits = -8;
  for (char c : in) {
    int d;
    if (c >= 'A' && c <= 'Z') d = c - 'A';
    else if (c >= 'a' && c <= 'z') d = c - 'a' + 26;
    else if (c >= '0' && c <= '9') d = c - '0' + 52;
    else if (c == '+') d = 62;
    else if (c == '/') d = 63;
    else if (c == '=') break;
    else ds4::fail("line {}: \"b64\" has a character that is not base64", line_no);
    val = (val << 6) | uint32_t(d);
    bits += 6;
    if (bits >= 0) {
      out += static_cast<char>((val >> bits) & 0xFF);
      bits -= 8;
    }
  }
  return out;
}

std::string text_of(const std::string& line, size_t line_no) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(line);
  } catch (const nlohmann::json::exception& e) {
    ds4::fail("line {}: not valid JSON: {}", line_no, e.what());
  }
  if (j.is_string()) return j.get<std::string>();
  if (j.is_object() && j.contains("text") && j["text"].is_string()) return j["text"].get<std::string>();
  if (j.is_object() && j.contains("b64") && j["b64"].is_string()) return base64_decode(j["b64"].get<std::string>(), line_no);
  ds4::fail("line {}: expected a JSON string or an object with a string \"text\" or \"b64\"", line_no);
}

int cmd_tokenize(int argc, char** argv) {
  std::string model, in;
  bool special = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto value = [&]() -> std::string {
      if (i + 1 >= argc) ds4::fail("{} needs a value ({})", a, kUsage);
      return argv[++i];
    };
    if (a == "-m" || a == "--model") model = value();
    else if (a == "--jsonl") in = value();
    else if (a == "--special") special = true;
    else ds4::fail("unknown argument '{}' ({})", a, kUsage);
  }
  if (model.empty() || in.empty()) ds4::fail("{}", kUsage);

  const ds4::Tokenizer tok = ds4::Tokenizer::load(model);
  std::ifstream file;
  if (in != "-") {
    file.open(in, std::ios::binary);
    if (!file) ds4::fail("{}: cannot open", in);
  }
  std::istream& is = in == "-" ? std::cin : file;
  std::string line, out, text;
  std::vector<int32_t> ids;
  size_t line_no = 0, bad_lines = 0;
  while (std::getline(is, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    try {
      text = text_of(line, line_no);
    } catch (const ds4::Error& e) {
      fmt::print(stderr, "ds4-gguf tokenize: {}: {}\n", in, e.what());
      std::fwrite("null\n", 1, 5, stdout);
      ++bad_lines;
      continue;
    }
    ids.clear();
    tok.encode_append(text, special, ids);
    out = "[";
    for (size_t k = 0; k < ids.size(); ++k) fmt::format_to(std::back_inserter(out), "{}{}", k ? "," : "", ids[k]);
    out += "]\n";
    std::fwrite(out.data(), 1, out.size(), stdout);
  }
  if (is.bad()) ds4::fail("{}: read error", in);
  if (bad_lines) ds4::fail("{}: {} of {} lines could not be read (printed as null)", in, bad_lines, line_no);
  return 0;
}

const bool registered = ds4::tools::register_command(
    {"tokenize", "-m FILE.gguf [--special] --jsonl IN   token ids, one JSON array per input line", cmd_tokenize});

}  // namespace
