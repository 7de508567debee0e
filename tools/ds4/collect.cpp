// Offline analysis mode: `ds4 --imatrix-out F --imatrix-data TEXT|PROMPTS.jsonl` (and/or
// --expert-profile-out F) evaluates the data in chunks through the Engine with collection on,
// writing the files every --imatrix-checkpoint chunks and at the end (atomically).
#include <fmt/format.h>

#include <chrono>
#include <fstream>
#include <sstream>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "ds4/engine.h"
#include "ds4/session.h"
#include "options.h"

namespace ds4::tools {

std::string read_text_file(const std::string& path, const char* what);

namespace {

// One text per JSONL line: an object with "prompt" or "text", or a JSON string.
std::vector<std::string> read_jsonl(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("--imatrix-data {}: cannot open", path);
  std::vector<std::string> out;
  std::string line;
  int ln = 0;
  while (std::getline(f, line)) {
    ++ln;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception&) {
      fail("--imatrix-data {} line {}: not valid JSON", path, ln);
    }
    if (j.is_string()) out.push_back(j.get<std::string>());
    else if (j.is_object() && j.contains("prompt") && j["prompt"].is_string()) out.push_back(j["prompt"].get<std::string>());
    else if (j.is_object() && j.contains("text") && j["text"].is_string()) out.push_back(j["text"].get<std::string>());
    else fail("--imatrix-data {} line {}: expected a string or an object with \"prompt\" or \"text\"", path, ln);
  }
  if (out.empty()) fail("--imatrix-data {}: no prompts", path);
  return out;
}

}  // namespace

int run_collect(const Ds4Options& c) {
  if (c.imatrix_out.empty() && c.expert_profile_out.empty())
    fail("--imatrix-data needs --imatrix-out and/or --expert-profile-out");
  if (c.imatrix_chunk < 2) fail("--imatrix-chunk {} must be at least 2", c.imatrix_chunk);
  EngineOptions eo;
  eo.model_path = c.model_path;
  eo.backend = c.backend;
  eo.threads = c.threads;
  eo.max_batch = c.batch;
  eo.act_quant_sim = c.act_quant_sim;
  eo.ctx_size = c.imatrix_chunk;
  eo.collect_imatrix = !c.imatrix_out.empty();
  eo.collect_expert_profile = !c.expert_profile_out.empty();
  eo.prune_mask = c.prune_mask;
  auto engine = Engine::open(eo);
  const Tokenizer& tok = engine->tokenizer();
  if (auto d = engine->prune_description(); !d.empty()) fmt::print(stderr, "{}\n", d);

  // Chunks of at most imatrix_chunk tokens: a text file is cut into consecutive chunks; each
  // JSONL prompt is one chunk (cut the same way when longer). No BOS is added.
  std::vector<std::vector<int32_t>> chunks;
  auto cut = [&](const std::vector<int32_t>& ids) {
    for (size_t i = 0; i < ids.size(); i += static_cast<size_t>(c.imatrix_chunk)) {
      const size_t n = std::min(ids.size() - i, static_cast<size_t>(c.imatrix_chunk));
      if (n >= 2 || chunks.empty()) chunks.emplace_back(ids.begin() + i, ids.begin() + i + n);
    }
  };
  const bool jsonl = c.imatrix_data.size() > 6 && c.imatrix_data.ends_with(".jsonl");
  if (jsonl) {
    for (const auto& p : read_jsonl(c.imatrix_data)) cut(tok.encode(p, false));
  } else {
    cut(tok.encode(read_text_file(c.imatrix_data, "--imatrix-data"), false));
  }
  if (c.imatrix_max_chunks > 0 && static_cast<int64_t>(chunks.size()) > c.imatrix_max_chunks)
    chunks.resize(static_cast<size_t>(c.imatrix_max_chunks));
  if (chunks.empty() || chunks[0].empty()) fail("--imatrix-data {}: no tokens", c.imatrix_data);

  const std::string dataset = c.imatrix_data.substr(c.imatrix_data.find_last_of('/') + 1);
  uint32_t done = 0;
  auto write_all = [&] {
    if (!c.imatrix_out.empty())
      engine->write_imatrix(c.imatrix_out, {dataset}, done, static_cast<uint32_t>(c.imatrix_chunk));
    if (!c.expert_profile_out.empty()) engine->write_expert_profile(c.expert_profile_out);
  };
  auto session = engine->new_session();
  const auto t0 = std::chrono::steady_clock::now();
  int64_t tokens = 0;
  for (const auto& ch : chunks) {
    session->sync({});  // each chunk starts from an empty context
    session->sync(ch);
    tokens += static_cast<int64_t>(ch.size());
    ++done;
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const bool tty = ::isatty(2), last = done == chunks.size();
    if (tty || last || (c.imatrix_checkpoint > 0 && done % c.imatrix_checkpoint == 0))
      fmt::print(stderr, "{}chunk {}/{}  {} tokens  {:.1f} t/s{}", tty ? "\r\033[K" : "", done, chunks.size(), tokens, s > 0 ? tokens / s : 0.0, tty ? "" : "\n");
    if (c.imatrix_checkpoint > 0 && done % c.imatrix_checkpoint == 0 && done < chunks.size()) {
      write_all();
      fmt::print(stderr, "  (checkpoint written){}", tty ? "" : "\n");
    }
  }
  if (::isatty(2)) fmt::print(stderr, "\n");
  write_all();
  if (!c.imatrix_out.empty()) fmt::print("wrote {} ({} chunks of <= {} tokens, {} tokens)\n", c.imatrix_out, done,
                                         c.imatrix_chunk, tokens);
  if (!c.expert_profile_out.empty()) fmt::print("wrote {} ({} tokens)\n", c.expert_profile_out, engine->analysis_tokens());
  return 0;
}

}  // namespace ds4::tools
