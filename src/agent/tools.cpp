#include "agent/tools.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <fmt/format.h>
#include <fnmatch.h>
#include <pcre2.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "agent/command.h"
#include "agent/diff.h"
#include "core/error.h"

namespace ds4::agent {

namespace fs = std::filesystem;
using chat::Json;

namespace {

std::string str_arg(const Json& a, const char* key, bool required, std::string def = "") {
  if (!a.contains(key) || a[key].is_null()) {
    if (required) throw ToolError(fmt::format("missing required argument '{}'", key));
    return def;
  }
  if (!a[key].is_string()) throw ToolError(fmt::format("argument '{}' must be a string", key));
  return a[key].get<std::string>();
}

// Integers may arrive as JSON numbers or, from a model that marked them string="true", as
// decimal text.
std::optional<double> num_arg(const Json& a, const char* key) {
  if (!a.contains(key) || a[key].is_null()) return std::nullopt;
  const Json& v = a[key];
  if (v.is_number()) return v.get<double>();
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    char* end = nullptr;
    const double d = std::strtod(s.c_str(), &end);
    if (!s.empty() && end && *end == '\0') return d;
  }
  throw ToolError(fmt::format("argument '{}' must be a number", key));
}

std::optional<int64_t> int_arg(const Json& a, const char* key) {
  auto d = num_arg(a, key);
  if (!d) return std::nullopt;
  if (*d != static_cast<double>(static_cast<int64_t>(*d))) throw ToolError(fmt::format("argument '{}' must be an integer", key));
  return static_cast<int64_t>(*d);
}

bool bool_arg(const Json& a, const char* key) {
  if (!a.contains(key) || a[key].is_null()) return false;
  if (a[key].is_boolean()) return a[key].get<bool>();
  if (a[key].is_string() && (a[key] == "true" || a[key] == "false")) return a[key] == "true";
  throw ToolError(fmt::format("argument '{}' must be true or false", key));
}

constexpr uintmax_t kMaxFileBytes = 64u << 20;

std::string read_all(const fs::path& p, const std::string& rel) {
  std::error_code ec;
  if (!fs::exists(p, ec)) throw ToolError(fmt::format("{}: no such file", rel));
  if (fs::is_directory(p, ec)) throw ToolError(fmt::format("{}: is a directory (use list)", rel));
  if (!fs::is_regular_file(p, ec)) throw ToolError(fmt::format("{}: not a regular file", rel));
  const uintmax_t size = fs::file_size(p, ec);
  if (!ec && size > kMaxFileBytes) throw ToolError(fmt::format("{}: {} bytes is too large for the file tools", rel, size));
  std::ifstream f(p, std::ios::binary);
  if (!f) throw ToolError(fmt::format("{}: cannot open for reading", rel));
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

bool looks_binary(std::string_view s) { return s.substr(0, 8192).find('\0') != std::string_view::npos; }

void write_all(const fs::path& p, const std::string& rel, std::string_view content) {
  std::error_code ec;
  fs::create_directories(p.parent_path(), ec);
  if (ec) throw ToolError(fmt::format("{}: cannot create its directory: {}", rel, ec.message()));
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  if (!f) throw ToolError(fmt::format("{}: cannot open for writing", rel));
  f.write(content.data(), static_cast<std::streamsize>(content.size()));
  f.close();
  if (!f) throw ToolError(fmt::format("{}: write failed", rel));
}

size_t count_lines(std::string_view s) {
  if (s.empty()) return 0;
  return static_cast<size_t>(std::count(s.begin(), s.end(), '\n')) + (s.back() == '\n' ? 0 : 1);
}

size_t line_of(std::string_view s, size_t offset) {
  return static_cast<size_t>(std::count(s.begin(), s.begin() + static_cast<std::ptrdiff_t>(offset), '\n')) + 1;
}

Json schema(const char* name, const char* desc, Json props, std::vector<std::string> required) {
  Json params = Json::object();
  params["type"] = "object";
  params["properties"] = std::move(props);
  params["required"] = required;
  Json fn = Json::object();
  fn["name"] = name;
  fn["description"] = desc;
  fn["parameters"] = std::move(params);
  Json t = Json::object();
  t["type"] = "function";
  t["function"] = std::move(fn);
  return t;
}

Json prop(const char* type, const char* desc) {
  Json p = Json::object();
  p["type"] = type;
  p["description"] = desc;
  return p;
}

// Walks the workdir (no symlinked directories followed, ".git" skipped) in sorted order.
template <class F>
void walk(const fs::path& start, F&& visit) {
  std::error_code ec;
  std::vector<fs::path> entries;
  for (fs::directory_iterator it(start, fs::directory_options::skip_permission_denied, ec), end; !ec && it != end;
       it.increment(ec))
    entries.push_back(it->path());
  std::sort(entries.begin(), entries.end());
  for (const auto& p : entries) {
    if (p.filename() == ".git") continue;
    const auto st = fs::symlink_status(p, ec);
    if (!visit(p, st)) return;
    if (fs::is_directory(st)) walk(p, visit);
  }
}

}  // namespace

bool glob_match(std::string_view pattern, std::string_view path) {
  auto split = [](std::string_view s) {
    std::vector<std::string> v;
    size_t at = 0;
    while (at <= s.size()) {
      size_t e = s.find('/', at);
      if (e == std::string_view::npos) e = s.size();
      if (e > at) v.emplace_back(s.substr(at, e - at));
      at = e + 1;
    }
    return v;
  };
  const auto P = split(pattern), S = split(path);
  // dp over (pattern segment, path segment).
  std::vector<std::vector<char>> memo(P.size() + 1, std::vector<char>(S.size() + 1, -1));
  std::function<bool(size_t, size_t)> m = [&](size_t i, size_t j) -> bool {
    char& r = memo[i][j];
    if (r >= 0) return r;
    bool ok;
    if (i == P.size()) ok = j == S.size();
    else if (P[i] == "**") ok = m(i + 1, j) || (j < S.size() && m(i, j + 1));
    else ok = j < S.size() && fnmatch(P[i].c_str(), S[j].c_str(), FNM_PERIOD) == 0 && m(i + 1, j + 1);
    r = ok;
    return ok;
  };
  return m(0, 0);
}

Tools::Tools(Workdir workdir, bool yes, ToolLimits limits) : wd_(std::move(workdir)), yes_(yes), lim_(limits) {}

std::vector<Json> Tools::schemas() {
  std::vector<Json> v;
  {
    Json p = Json::object();
    p["path"] = prop("string", "file path relative to the working directory");
    p["start_line"] = prop("integer", "first line to read (1-based, default 1)");
    p["end_line"] = prop("integer", "last line to read (inclusive; default: 2000 lines from start_line)");
    v.push_back(schema("read_file", "Read a text file. Lines come back numbered (number, tab, text).", std::move(p), {"path"}));
  }
  {
    Json p = Json::object();
    p["path"] = prop("string", "file path relative to the working directory");
    p["content"] = prop("string", "the complete new content of the file");
    v.push_back(schema("write_file", "Create a file or replace its whole content. Missing directories are created.",
                       std::move(p), {"path", "content"}));
  }
  {
    Json p = Json::object();
    p["path"] = prop("string", "file path relative to the working directory");
    p["old_text"] = prop("string", "text to replace; must occur exactly once in the file, whitespace included");
    p["new_text"] = prop("string", "replacement text");
    v.push_back(schema("edit", "Replace one exact occurrence of old_text in a file by new_text.", std::move(p),
                       {"path", "old_text", "new_text"}));
  }
  {
    Json p = Json::object();
    p["path"] = prop("string", "directory relative to the working directory (default: the working directory)");
    v.push_back(schema("list", "List a directory: subdirectories end with '/', files show their size.", std::move(p), {}));
  }
  {
    Json p = Json::object();
    p["pattern"] = prop("string", "glob relative to the working directory; '**' matches any number of directories, e.g. src/**/*.cpp");
    v.push_back(schema("glob", "Find files whose path matches a glob pattern.", std::move(p), {"pattern"}));
  }
  {
    Json p = Json::object();
    p["pattern"] = prop("string", "regular expression (PCRE syntax)");
    p["path"] = prop("string", "file or directory to search (default: the working directory)");
    p["glob"] = prop("string", "only search files whose path matches this glob, e.g. **/*.h");
    p["ignore_case"] = prop("boolean", "case-insensitive matching");
    v.push_back(schema("grep", "Search file contents; prints path:line: text for each matching line.", std::move(p),
                       {"pattern"}));
  }
  {
    Json p = Json::object();
    p["command"] = prop("string", "shell command (run with /bin/sh -c in the working directory)");
    p["timeout"] = prop("integer", "seconds before the command is killed (default 120)");
    v.push_back(schema("run_command",
                       "Run a shell command. Returns its exit code and its output (stdout and stderr merged; long "
                       "output is cut in the middle).",
                       std::move(p), {"command"}));
  }
  return v;
}

bool Tools::approve(bool& always, const std::string& question, ToolHost& host, ToolOutcome& declined) {
  if (yes_ || always) return true;
  const Answer a = host.confirm(question);
  if (a == Answer::Always) always = true;
  if (a != Answer::No) return true;
  declined.ok = false;
  declined.declined = true;
  declined.text = "error: the user declined this action";
  return false;
}

ToolOutcome Tools::run(const chat::ToolCall& call, ToolHost& host, const std::atomic<bool>* cancel) {
  try {
    if (!call.arguments_valid || !(call.arguments.is_object() || call.arguments.is_null()))
      throw ToolError("arguments must be a JSON object");
    const Json a = call.arguments.is_null() ? Json::object() : call.arguments;
    if (call.name == "read_file") return read_file(a);
    if (call.name == "write_file") return write_file(a, host);
    if (call.name == "edit") return edit(a, host);
    if (call.name == "list") return list(a);
    if (call.name == "glob") return glob(a);
    if (call.name == "grep") return grep(a);
    if (call.name == "run_command") return command(a, host, cancel);
    throw ToolError(fmt::format("unknown tool '{}' (tools: read_file, write_file, edit, list, glob, grep, run_command)",
                                call.name));
  } catch (const ToolError& e) {
    return ToolOutcome{false, fmt::format("error: {}: {}", call.name, e.what())};
  } catch (const std::exception& e) {
    return ToolOutcome{false, fmt::format("error: {}: {}", call.name, e.what())};
  }
}

ToolOutcome Tools::read_file(const Json& a) {
  const std::string rel = str_arg(a, "path", true);
  const fs::path p = wd_.resolve(rel);
  const std::string s = read_all(p, rel);
  if (looks_binary(s)) throw ToolError(fmt::format("{}: binary file ({} bytes)", rel, s.size()));
  const int64_t start = int_arg(a, "start_line").value_or(1);
  if (start < 1) throw ToolError("start_line must be at least 1");
  const int64_t total = static_cast<int64_t>(count_lines(s));
  int64_t end = int_arg(a, "end_line").value_or(start + static_cast<int64_t>(lim_.read_max_lines) - 1);
  if (end < start) throw ToolError(fmt::format("end_line {} is before start_line {}", end, start));
  if (total == 0) return ToolOutcome{true, fmt::format("{}: empty file", rel)};
  if (start > total) throw ToolError(fmt::format("{}: start_line {} is past the end of the file ({} lines)", rel, start, total));
  end = std::min({end, total, start + static_cast<int64_t>(lim_.read_max_lines) - 1});
  std::string out;
  int64_t line = 1;
  size_t at = 0;
  bool cut = false;
  while (at < s.size() && line <= end) {
    size_t nl = s.find('\n', at);
    const size_t e = nl == std::string::npos ? s.size() : nl;
    if (line >= start) {
      if (out.size() + (e - at) > lim_.read_max_bytes) {
        cut = true;
        end = line - 1;
        break;
      }
      out += fmt::format("{:>6}\t", line);
      out.append(s, at, e - at);
      out += '\n';
    }
    at = e + 1;
    ++line;
  }
  if (end < total || start > 1 || cut)
    out += fmt::format("[lines {}-{} of {}{}]", start, end, total,
                       end < total ? "; read more with start_line" : "");
  return ToolOutcome{true, out};
}

ToolOutcome Tools::write_file(const Json& a, ToolHost& host) {
  const std::string rel = str_arg(a, "path", true);
  const std::string content = str_arg(a, "content", true);
  const fs::path p = wd_.resolve(rel, /*for_write=*/true);
  std::error_code ec;
  const bool exists = fs::exists(p, ec);
  std::string before;
  if (exists) {
    before = read_all(p, rel);
    if (before == content) return ToolOutcome{true, fmt::format("{}: unchanged (the content is the same)", rel)};
    host.show_diff(looks_binary(before) ? fmt::format("{}: binary file replaced\n", rel) : unified_diff(before, content, rel));
  } else {
    host.show_diff(unified_diff("", content, rel));
  }
  ToolOutcome no;
  if (!approve(always_write_, fmt::format("{} {}?", exists ? "Overwrite" : "Create", rel), host, no)) return no;
  write_all(p, rel, content);
  return ToolOutcome{true, fmt::format("{} {} ({} lines, {} bytes)", exists ? "wrote" : "created", rel,
                                       count_lines(content), content.size())};
}

ToolOutcome Tools::edit(const Json& a, ToolHost& host) {
  const std::string rel = str_arg(a, "path", true);
  const std::string old_text = str_arg(a, "old_text", true);
  const std::string new_text = str_arg(a, "new_text", true);
  if (old_text.empty()) throw ToolError("old_text is empty; give the exact text to replace (write_file creates files)");
  if (old_text == new_text) throw ToolError("old_text and new_text are the same");
  const fs::path p = wd_.resolve(rel, /*for_write=*/true);
  const std::string s = read_all(p, rel);
  std::vector<size_t> hits;
  for (size_t at = s.find(old_text); at != std::string::npos; at = s.find(old_text, at + old_text.size())) hits.push_back(at);
  if (hits.empty())
    throw ToolError(fmt::format("{}: old_text was not found (it must match the file exactly, whitespace and "
                                "indentation included; read_file shows the current text)",
                                rel));
  if (hits.size() > 1) {
    std::string lines;
    for (size_t i = 0; i < hits.size() && i < 10; ++i) lines += fmt::format("{}{}", i ? ", " : "", line_of(s, hits[i]));
    throw ToolError(fmt::format("{}: old_text occurs {} times (at lines {}); include more surrounding text so it "
                                "matches exactly once",
                                rel, hits.size(), lines));
  }
  const std::string after = s.substr(0, hits[0]) + new_text + s.substr(hits[0] + old_text.size());
  host.show_diff(unified_diff(s, after, rel));
  ToolOutcome no;
  if (!approve(always_write_, fmt::format("Apply this edit to {}?", rel), host, no)) return no;
  write_all(p, rel, after);
  const size_t first = line_of(s, hits[0]);
  return ToolOutcome{true, fmt::format("edited {}: lines {}-{} replaced by {} lines", rel, first,
                                       first + count_lines(old_text) - 1, count_lines(new_text))};
}

ToolOutcome Tools::list(const Json& a) {
  const std::string rel = str_arg(a, "path", false, ".");
  const fs::path p = wd_.resolve(rel);
  std::error_code ec;
  if (!fs::is_directory(p, ec)) throw ToolError(fmt::format("{}: not a directory", rel));
  std::vector<std::string> rows;
  for (fs::directory_iterator it(p, fs::directory_options::skip_permission_denied, ec), end; !ec && it != end;
       it.increment(ec)) {
    const auto st = it->symlink_status(ec);
    std::string name = it->path().filename().string();
    if (fs::is_symlink(st)) name += " -> " + fs::read_symlink(it->path(), ec).string();
    else if (fs::is_directory(st)) name += "/";
    else if (fs::is_regular_file(st)) name += fmt::format("  ({} bytes)", it->file_size(ec));
    rows.push_back(std::move(name));
  }
  if (ec) throw ToolError(fmt::format("{}: {}", rel, ec.message()));
  std::sort(rows.begin(), rows.end());
  std::string out;
  for (size_t i = 0; i < rows.size() && i < lim_.list_max; ++i) out += rows[i] + "\n";
  if (rows.size() > lim_.list_max) out += fmt::format("[{} more entries not shown]\n", rows.size() - lim_.list_max);
  if (rows.empty()) out = fmt::format("{}: empty directory\n", rel);
  return ToolOutcome{true, out};
}

ToolOutcome Tools::glob(const Json& a) {
  const std::string pattern = str_arg(a, "pattern", true);
  if (pattern.empty()) throw ToolError("pattern is empty");
  if (pattern[0] == '/') throw ToolError("the pattern must be relative to the working directory");
  std::vector<std::string> hits;
  size_t more = 0;
  walk(wd_.root(), [&](const fs::path& p, const fs::file_status&) {
    const std::string rel = wd_.relative(p);
    if (glob_match(pattern, rel)) {
      if (hits.size() < lim_.list_max) hits.push_back(rel);
      else ++more;
    }
    return true;
  });
  if (hits.empty()) return ToolOutcome{true, fmt::format("no files match {}", pattern)};
  std::string out;
  for (const auto& h : hits) out += h + "\n";
  if (more) out += fmt::format("[{} more matches not shown]\n", more);
  return ToolOutcome{true, out};
}

ToolOutcome Tools::grep(const Json& a) {
  const std::string pattern = str_arg(a, "pattern", true);
  const std::string rel = str_arg(a, "path", false, ".");
  const std::string filter = str_arg(a, "glob", false);
  const bool icase = bool_arg(a, "ignore_case");
  int err = 0;
  PCRE2_SIZE off = 0;
  pcre2_code* re = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                 icase ? PCRE2_CASELESS : 0, &err, &off, nullptr);
  if (!re) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    throw ToolError(fmt::format("bad regular expression at offset {}: {}", off, reinterpret_cast<const char*>(msg)));
  }
  std::unique_ptr<pcre2_code, void (*)(pcre2_code*)> re_guard(re, pcre2_code_free);
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(re, nullptr);
  std::unique_ptr<pcre2_match_data, void (*)(pcre2_match_data*)> md_guard(md, pcre2_match_data_free);

  const fs::path start = wd_.resolve(rel);
  std::string out;
  size_t matches = 0, more = 0;
  auto search = [&](const fs::path& p) {
    std::error_code ec;
    if (fs::file_size(p, ec) > kMaxFileBytes || ec) return;
    std::ifstream f(p, std::ios::binary);
    std::ostringstream ss;
    ss << f.rdbuf();
    const std::string s = ss.str();
    if (looks_binary(s)) return;
    const std::string name = wd_.relative(p);
    size_t at = 0, line = 1;
    while (at < s.size()) {
      size_t nl = s.find('\n', at);
      const size_t e = nl == std::string::npos ? s.size() : nl;
      const int rc = pcre2_match(re, reinterpret_cast<PCRE2_SPTR>(s.data() + at), e - at, 0, 0, md, nullptr);
      if (rc >= 0) {
        if (matches < lim_.grep_max_matches) {
          std::string text = s.substr(at, std::min<size_t>(e - at, 300));
          if (e - at > 300) text += "...";
          out += fmt::format("{}:{}: {}\n", name, line, text);
          ++matches;
        } else {
          ++more;
        }
      }
      at = e + 1;
      ++line;
    }
  };
  std::error_code ec;
  if (fs::is_regular_file(start, ec)) {
    search(start);
  } else if (fs::is_directory(start, ec)) {
    walk(start, [&](const fs::path& p, const fs::file_status& st) {
      if (fs::is_regular_file(st) && (filter.empty() || glob_match(filter, wd_.relative(p)))) search(p);
      return true;
    });
  } else {
    throw ToolError(fmt::format("{}: no such file or directory", rel));
  }
  if (matches == 0) return ToolOutcome{true, fmt::format("no matches for {}", pattern)};
  if (more) out += fmt::format("[{} more matching lines not shown]\n", more);
  return ToolOutcome{true, out};
}

ToolOutcome Tools::command(const Json& a, ToolHost& host, const std::atomic<bool>* cancel) {
  const std::string cmd = str_arg(a, "command", true);
  if (cmd.empty()) throw ToolError("command is empty");
  double timeout = num_arg(a, "timeout").value_or(lim_.command_timeout_s);
  if (!(timeout > 0)) throw ToolError("timeout must be positive");
  timeout = std::min(timeout, lim_.command_max_timeout_s);
  ToolOutcome no;
  if (!approve(always_command_, fmt::format("Run `{}`?", cmd), host, no)) return no;
  host.command_started(cmd);
  CommandOptions o;
  o.timeout_s = timeout;
  o.max_output = lim_.command_max_output;
  o.cancel = cancel;
  const CommandResult r = run_command(cmd, wd_.root(), o);
  ToolOutcome out;
  out.text = describe(r, timeout);
  out.ok = r.end == CommandResult::End::Exited && r.exit_code == 0;
  out.interrupted = r.end == CommandResult::End::Cancelled;
  return out;
}

}  // namespace ds4::agent
