#include "chat_runner.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>

#include "chat/chatml.h"
#include "chat/markers.h"
#include "chat/renderer.h"
#include "core/error.h"

namespace ds4::tools {

namespace {
std::atomic<bool> g_interrupt{false};
extern "C" void on_sigint(int) { g_interrupt.store(true); }
}  // namespace

std::atomic<bool>& interrupt_flag() { return g_interrupt; }

void install_interrupt_handler() {
  struct sigaction sa {};
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
}

void restore_default_interrupt() { std::signal(SIGINT, SIG_DFL); }

chat::ThinkingMode parse_thinking(const std::string& s) {
  if (s == "none") return chat::ThinkingMode::None;
  if (s == "max") return chat::ThinkingMode::Max;
  return chat::ThinkingMode::High;
}

std::string format_stats(const TurnStats& s) {
  const double pps = s.prefill_s > 0 ? static_cast<double>(s.prompt_tokens) / s.prefill_s : 0.0;
  const double gps = s.generate_s > 0 ? static_cast<double>(s.generated) / s.generate_s : 0.0;
  const std::string disk = s.from_disk > 0 ? fmt::format(", {} from disk", s.from_disk) : std::string();
  return fmt::format("[prompt {} tokens ({} reused{}), prefill {:.1f} t/s | generated {} tokens, {:.1f} t/s | {}]",
                     s.prompt_tokens, s.reused_tokens, disk, pps, s.generated, gps, to_string(s.reason));
}

ChatRunner::ChatRunner(std::shared_ptr<const Engine> engine, const ChatCliOptions& o)
    : engine_(std::move(engine)), o_(o), thinking_(parse_thinking(o.think)) {
  SessionOptions so;
  so.n_ctx = o.ctx;
  session_ = engine_->new_session(so);
  SamplerConfig sc;
  sc.temperature = o.temperature;
  sc.top_k = o.top_k;
  sc.top_p = o.top_p;
  sc.min_p = o.min_p;
  sc.seed = o.seed ? *o.seed : std::random_device{}();
  session_->set_sampler(sc);
  sampler_config_ = sc;
  if (!o.kv_disk_dir.empty()) {
    kvdisk::StoreOptions ko;
    ko.dir = o.kv_disk_dir;
    ko.model_id = engine_->info().model_id;
    ko.budget_bytes = static_cast<uint64_t>(o.kv_disk_space_mb) << 20;
    try {
      store_ = kvdisk::Store::open(ko);
    } catch (const Error& e) {
      fmt::print(stderr, "ds4: {}; continuing without the disk KV cache\n", e.what());
    }
  }
  if (!o.trace.empty()) {
    trace_ = std::fopen(o.trace.c_str(), "a");
    if (!trace_) fail("--trace {}: cannot open for appending", o.trace);
  }
}

ChatRunner::~ChatRunner() {
  if (trace_) std::fclose(trace_);
}

void ChatRunner::trace(const std::string& line) const {
  if (!trace_) return;
  std::fputs(line.c_str(), trace_);
  std::fputc('\n', trace_);
  std::fflush(trace_);
}

bool ChatRunner::chatml() const {
  return chat::chat_format_for_architecture(engine_->info().architecture) == chat::ChatFormat::ChatML;
}

// True when the last assistant turn opened <think> and never closed it (generation stopped
// by Ctrl+C or -n while reasoning). The renderer writes such a turn as <think>…</think>.
bool ChatRunner::reasoning_open(const std::vector<int32_t>& toks) const {
  const Tokenizer& tok = engine_->tokenizer();
  if (chatml()) {  // the last turn opened with <|im_start|>, then <think> without </think>
    const auto start = tok.find_token(chat::chatml::kImStart);
    const auto open = tok.find_token(chat::chatml::kThinkOpen);
    const auto close = tok.find_token(chat::chatml::kThinkClose);
    if (!start || !open || !close) return false;
    bool opened = false;
    for (size_t i = toks.size(); i-- > 0;) {
      if (toks[i] == *close) return false;
      if (toks[i] == *open) opened = true;
      if (toks[i] == *start) return opened;
    }
    return false;
  }
  const auto asst = tok.find_token(chat::mark::kAssistant);
  const auto open = tok.find_token(chat::mark::kThinkOpen);
  const auto close = tok.find_token(chat::mark::kThinkClose);
  if (!asst || !open || !close) return false;
  for (size_t i = toks.size(); i-- > 0;) {
    if (toks[i] == *close) return false;
    if (toks[i] == *asst) return i + 1 < toks.size() && toks[i + 1] == *open;
  }
  return false;
}

std::vector<int32_t> ChatRunner::next_input(const std::string& user_text) const {
  const Tokenizer& tok = engine_->tokenizer();
  if (o_.raw) {
    // Like llama.cpp's default for raw prompts: a fresh timeline starts with BOS, unless the
    // prompt text already spells it.
    auto ids = tok.encode(user_text, /*parse_special=*/true);
    const auto bos = tok.bos_id();
    if (session_->n_past() == 0 && bos && (ids.empty() || ids.front() != *bos)) ids.insert(ids.begin(), *bos);
    return ids;
  }
  std::string text;
  if (session_->n_past() == 0) {
    chat::Conversation conv;
    if (!o_.system.empty()) {
      chat::Message m;
      m.role = chat::Role::System;
      m.content = o_.system;
      conv.messages.push_back(std::move(m));
    }
    chat::Message u;
    u.role = chat::Role::User;
    u.content = user_text;
    conv.messages.push_back(std::move(u));
    chat::RenderOptions ro;
    ro.thinking = thinking_;
    ro.context_size = static_cast<uint64_t>(session_->n_ctx());
    ro.drop_thinking = false;  // keep earlier reasoning: turns then only append
    ro.format = chatml() ? chat::ChatFormat::ChatML : chat::ChatFormat::DeepSeekV4;
    ro.chatml_template = chat::chatml_template_for(engine_->info().chat_template);
    text = chat::render_prompt(conv, ro);
  } else if (chatml()) {
    // What the ChatML template writes between an answer and the next user turn: the answer's
    // <|im_end|> (unless the model already produced it), the user turn, the assistant opening.
    const auto& toks = session_->tokens();
    const auto end = engine_->tokenizer().find_token(chat::chatml::kImEnd);
    if (reasoning_open(toks)) text += "\n" + std::string(chat::chatml::kThinkClose) + "\n\n";
    if (!(end && !toks.empty() && toks.back() == *end)) text += chat::chatml::kImEnd;
    text += "\n" + std::string(chat::chatml::kImStart) + "user\n" + user_text + std::string(chat::chatml::kImEnd) + "\n" +
            std::string(chat::chatml::kImStart) + "assistant\n" + std::string(chat::chatml::kThinkOpen) + "\n";
    if (thinking_ == chat::ThinkingMode::None) text += "\n" + std::string(chat::chatml::kThinkClose) + "\n\n";
  } else {
    // What render_prompt writes after an assistant turn for the next user message: EOS
    // closing the answer (unless the model's EOS is already in the state), the user turn,
    // the assistant opening with the thinking marker. Think-Max's prefix sits at the start
    // of the conversation and is not repeated.
    const auto& toks = session_->tokens();
    const auto eos = engine_->info().eos_id;
    if (reasoning_open(toks)) text += chat::mark::kThinkClose;  // an answer cut off while reasoning
    if (!(eos && !toks.empty() && toks.back() == *eos)) text += chat::mark::kEos;
    text += chat::mark::kUser;
    text += user_text;
    text += chat::mark::kAssistant;
    text += thinking_ == chat::ThinkingMode::None ? chat::mark::kThinkClose : chat::mark::kThinkOpen;
  }
  return tok.encode(text, /*parse_special=*/true);
}

TurnStats ChatRunner::turn(const std::string& user_text, std::FILE* out) {
  TurnStats st;
  std::vector<int32_t> input = session_->tokens();
  const auto add = next_input(user_text);
  input.insert(input.end(), add.begin(), add.end());

  st.from_disk = disk_load(input);

  auto& stop = interrupt_flag();
  stop = false;
  const bool bar = isatty(STDERR_FILENO);
  EvalOptions eo;
  eo.cancel = &stop;
  if (bar)
    eo.progress = [](int64_t done, int64_t total) {
      if (total < 256) return;  // short prefills finish before a bar helps
      const int w = 30;
      const int fill = static_cast<int>(static_cast<double>(done) / static_cast<double>(total) * w);
      fmt::print(stderr, "\r\033[Kprefill [{}{}] {}/{}", std::string(static_cast<size_t>(fill), '='),
                 std::string(static_cast<size_t>(w - fill), ' '), done, total);
    };
  const EvalResult r = session_->sync(input, eo);
  if (bar && r.evaluated + r.replayed >= 256) fmt::print(stderr, "\r\033[K");
  st.prompt_tokens = r.evaluated;
  st.reused_tokens = r.reused;
  st.prefill_s = r.seconds;
  trace(nlohmann::json{{"event", "prefill"},
                       {"reused", r.reused},
                       {"replayed", r.replayed},
                       {"evaluated", r.evaluated},
                       {"cancelled", r.cancelled},
                       {"seconds", r.seconds}}
            .dump());
  if (r.cancelled) {
    st.reason = StopReason::Cancelled;
    return st;
  }
  disk_save(kvdisk::SaveReason::Cold);

  const bool out_is_tty = isatty(fileno(out));
  GenerateOptions go;
  go.max_tokens = o_.n_predict;
  go.stop_at_stop_tokens = !o_.ignore_eos;
  go.cancel = &stop;
  if (!o_.dump_logprobs.empty()) go.logprobs_top_n = o_.logprobs_top_k;
  const auto g = session_->generate(go, [&](const GeneratedToken& t) {
    if (!t.is_stop) {
      if (out_is_tty) {
        // Model output is untrusted: on a terminal, control bytes (other than tab and
        // newline) could be escape sequences; show them as '?'.
        std::string p = t.piece;
        for (char& ch : p)
          if ((static_cast<unsigned char>(ch) < 0x20 && ch != '\n' && ch != '\t') || ch == 0x7f) ch = '?';
        std::fwrite(p.data(), 1, p.size(), out);
      } else {
        std::fwrite(t.piece.data(), 1, t.piece.size(), out);
      }
      std::fflush(out);
    }
    if (go.logprobs_top_n >= 0) logprob_steps.push_back({t});
    trace(nlohmann::json{{"event", "token"}, {"id", t.id}, {"stop", t.is_stop}}.dump());
    return true;
  });
  st.generated = g.n_generated;
  st.generate_s = g.seconds;
  st.reason = g.reason;
  trace(nlohmann::json{{"event", "turn_end"},
                       {"generated", g.n_generated},
                       {"reason", to_string(g.reason)},
                       {"n_past", session_->n_past()}}
            .dump());
  return st;
}

void ChatRunner::print_stats(const TurnStats& s) const {
  if (o_.no_stats) return;
  fmt::print(stderr, "\n{}\n", format_stats(s));
}

std::unique_ptr<Session> ChatRunner::new_session(int64_t n_ctx) const {
  SessionOptions so;
  so.n_ctx = n_ctx;
  auto s = engine_->new_session(so);
  if (steer_set_) s->set_steering(steer_attn_, steer_ffn_);
  return s;
}

void ChatRunner::set_ctx(int64_t n) {
  auto next = new_session(n);
  next->set_sampler(session_->sampler().config());
  next->sampler().rng().set_state(session_->sampler().rng().state());
  if (session_->n_past() > next->n_ctx())
    fail("/ctx {}: the conversation already holds {} tokens; /save it or start over", n, session_->n_past());
  if (session_->n_past() > 0) next->load_payload_any_steering(session_->save_payload());
  session_ = std::move(next);
}

void ChatRunner::load(const std::string& path) { session_->load(path); }

namespace {
int64_t common_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  size_t i = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
  return static_cast<int64_t>(i);
}
}  // namespace

// Loads the longest prefix of `input` found on disk when it is longer than what the session
// already holds. The payload goes into a new session first, so a file that fails (or holds
// other tokens) leaves the current one untouched. The sampler keeps its own stream.
int64_t ChatRunner::disk_load(const std::vector<int32_t>& input) {
  const int64_t n = static_cast<int64_t>(input.size());
  const int64_t min = o_.kv_cache_min_tokens;
  if (!store_ || n < min) return 0;
  const int64_t have = common_prefix(session_->tokens(), input);
  if (have == n) return 0;
  const auto m = store_->longest_prefix(input, engine_->tokenizer(), static_cast<uint64_t>(std::max(min, have + 1)),
                                        static_cast<uint64_t>(n));
  auto d = m ? store_->load(m->key) : std::nullopt;
  if (!d) {
    store_->note_miss();
    return 0;
  }
  auto next = new_session(session_->n_ctx());
  try {
    next->load_payload(d->payload);
  } catch (const Error& e) {
    store_->discard(m->key, e.what());
    return 0;
  }
  if (common_prefix(next->tokens(), input) != next->n_past()) return 0;
  next->set_sampler(session_->sampler().config());
  next->sampler().rng().set_state(session_->sampler().rng().state());
  session_ = std::move(next);
  trace(nlohmann::json{{"event", "disk_load"}, {"tokens", session_->n_past()}, {"file", store_->path_of(m->key)}}.dump());
  return session_->n_past();
}

void ChatRunner::disk_save(kvdisk::SaveReason reason) {
  if (!store_ || session_->n_past() < o_.kv_cache_min_tokens) return;
  const std::string text = engine_->tokenizer().decode(session_->tokens());
  if (store_->contains(kvdisk::Sha1::of(text))) return;
  store_->save(reason, text, static_cast<uint64_t>(session_->n_past()), static_cast<uint64_t>(session_->n_ctx()),
               session_->save_payload());
}

// The REPL's own pointer: <dir>/repl-last holds the key of the state it saved on exit.
int64_t ChatRunner::resume_from_disk() {
  if (!store_) return 0;
  std::ifstream f(std::filesystem::path(store_->dir()) / "repl-last");
  std::string hex;
  kvdisk::Digest key{};
  if (!(f >> hex) || !kvdisk::from_hex(hex, key) || !store_->contains(key)) return 0;
  auto d = store_->load(key);
  if (!d) return 0;
  try {
    session_->load_payload(d->payload);
  } catch (const Error& e) {
    store_->discard(key, e.what());
    return 0;
  }
  session_->set_sampler(sampler_config_);
  return session_->n_past();
}

void ChatRunner::save_on_exit() {
  if (!store_ || session_->n_past() < o_.kv_cache_min_tokens) return;
  disk_save(kvdisk::SaveReason::Shutdown);
  const std::string text = engine_->tokenizer().decode(session_->tokens());
  const auto key = kvdisk::Sha1::of(text);
  if (!store_->contains(key)) return;  // the save failed (warned)
  const auto p = std::filesystem::path(store_->dir()) / "repl-last";
  {
    std::ofstream f(p.string() + ".tmp");
    f << kvdisk::to_hex(key) << "\n";
  }
  std::error_code ec;
  std::filesystem::rename(p.string() + ".tmp", p, ec);
}

void ChatRunner::start_over() {
  auto next = new_session(session_->n_ctx());
  next->set_sampler(sampler_config_);
  session_ = std::move(next);
}

}  // namespace ds4::tools
