// Session: sync / eval / rewind over checkpoints, sampling.
#include <fmt/format.h>

#include <chrono>
#include <cmath>

#include "core/error.h"
#include "session/session_impl.h"

namespace ds4 {

namespace {
using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }
}  // namespace

ContextOverflow::ContextOverflow(int64_t n_ctx, int64_t requested)
    : Error(fmt::format("context overflow: {} tokens do not fit the {}-token context ({} over)", requested, n_ctx,
                        requested - n_ctx)),
      n_ctx_(n_ctx),
      requested_(requested) {}

std::unique_ptr<Session> Engine::new_session(const SessionOptions& o) const {
  if (o.n_ctx < 0) fail("session: n_ctx {} is negative", o.n_ctx);
  if (o.checkpoint_interval < 0) fail("session: checkpoint_interval {} is negative", o.checkpoint_interval);
  if (o.max_checkpoints < 0) fail("session: max_checkpoints {} is negative", o.max_checkpoints);
  auto s = std::make_unique<Session::Impl>();
  s->engine = shared_from_this();
  s->e = impl_.get();
  s->options = o;
  s->steer_attn = impl_->options.dir_steering_attn;
  s->steer_ffn = impl_->options.dir_steering_ffn;
  s->n_ctx = o.n_ctx > 0 ? o.n_ctx : impl_->info.n_ctx;
  if (impl_->shared_backend) {
    s->backend = impl_->shared_backend.get();
  } else {
    s->own_backend = compute::make_cpu_backend(impl_->pool.get());
    s->backend = s->own_backend.get();
  }
  if (impl_->analysis) {
    s->analysis_backend =
        std::make_unique<compute::AnalysisBackend>(*s->backend, impl_->analysis->stats, impl_->analysis->cfg);
    s->backend = s->analysis_backend.get();
  }
  s->fresh_state();
  return std::unique_ptr<Session>(new Session(std::move(s)));
}

Session::Session(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Session::~Session() = default;

const Engine& Session::engine() const { return *impl_->engine; }
int64_t Session::n_ctx() const { return impl_->n_ctx; }
int64_t Session::n_past() const { return impl_->n_pos(); }
const std::vector<int32_t>& Session::tokens() const { return impl_->tokens(); }
std::span<const float> Session::logits() const {
  if (impl_->n_pos() == 0) return {};
  return impl_->logits();
}

void Session::Impl::fresh_state() {
  if (qwen()) qstate = e->qwen->new_state(*backend, n_ctx);
  else state = new_state();
  state_sig = current_sig();
}

SteerSig Session::Impl::current_sig() const {
  if (steer_attn == 0.0f && steer_ffn == 0.0f) return {};
  return {e->steering_id, steer_attn, steer_ffn, false};
}

void Session::Impl::eval_tokens(std::span<const int32_t> tokens) {
  if (tokens.empty()) return;
  const SteerSig now = current_sig();
  if (n_pos() == 0) state_sig = now;
  else if (!(state_sig == now)) state_sig.mixed = true;
  if (qwen()) {
    e->qwen->eval(*backend, qstate, tokens, nullptr);
  } else if (now.id != 0) {
    steer::SteerHook hook(*e->steering, e->model->hparams().n_hc, steer_attn, steer_ffn);
    e->model->eval(*backend, state, tokens, nullptr, &hook);
  } else {
    e->model->eval(*backend, state, tokens, nullptr);
  }
}

void Session::set_steering(float attn, float ffn) {
  if (!std::isfinite(attn) || !std::isfinite(ffn)) fail("steering scales must be finite (got {} and {})", attn, ffn);
  if ((attn != 0.0f || ffn != 0.0f) && !impl_->e->steering)
    fail("steering scales {} / {} need a steering file (--dir-steering-file); the engine was opened without one",
         attn, ffn);
  impl_->steer_attn = attn;
  impl_->steer_ffn = ffn;
  if (impl_->n_pos() == 0) impl_->state_sig = impl_->current_sig();
}
float Session::steering_attn() const { return impl_->steer_attn; }
float Session::steering_ffn() const { return impl_->steer_ffn; }

void Session::Impl::reset() {
  fresh_state();
  checkpoints.clear();
}

void Session::Impl::check_fits(int64_t total) const {
  if (total > n_ctx) throw ContextOverflow(n_ctx, total);
}

void Session::Impl::check_ids(std::span<const int32_t> tokens) const {
  const int32_t V = e->info.n_vocab;
  for (size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] < 0 || tokens[i] >= V)
      fail("token {} (at index {}) is outside the vocabulary [0, {})", tokens[i], i, V);
}

void Session::Impl::add_checkpoint() {
  if (n_pos() == 0) return;  // the empty state needs no copy
  if (!checkpoints.empty() && checkpoints.back().n_pos == n_pos()) return;
  if (options.max_checkpoints == 0) return;
  checkpoints.push_back(qwen() ? session::take_checkpoint(qstate) : session::take_checkpoint(state));
  // Over the limit: keep the newest two (the latest turn boundaries, where rewinds usually
  // land) and drop the older checkpoint whose removal leaves the smallest gap, so the kept
  // ones thin out evenly over the whole context instead of covering only its end.
  while (checkpoints.size() > static_cast<size_t>(options.max_checkpoints)) {
    if (checkpoints.size() <= 2) {
      checkpoints.pop_front();
      continue;
    }
    size_t drop = 0;
    int64_t best = INT64_MAX;
    for (size_t i = 0; i + 2 < checkpoints.size(); ++i) {
      const int64_t before = i == 0 ? 0 : checkpoints[i - 1].n_pos;
      const int64_t gap = checkpoints[i + 1].n_pos - before;
      if (gap < best) {
        best = gap;
        drop = i;
      }
    }
    checkpoints.erase(checkpoints.begin() + static_cast<std::ptrdiff_t>(drop));
  }
}

void Session::Impl::restore_at_most(int64_t n) {
  while (!checkpoints.empty() && checkpoints.back().n_pos > n) checkpoints.pop_back();
  if (checkpoints.empty()) {
    fresh_state();
    return;
  }
  if (qwen()) session::restore_checkpoint(qstate, checkpoints.back());
  else session::restore_checkpoint(state, checkpoints.back());
}

bool Session::Impl::append(std::span<const int32_t> tokens, const EvalOptions& o, bool end_checkpoint,
                           int64_t progress_base, int64_t progress_total) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int64_t K = options.checkpoint_interval;
  const int64_t B = e->options.max_batch;
  int64_t done = 0;
  while (done < n) {
    if (o.cancel && o.cancel->load(std::memory_order_relaxed)) {
      if (end_checkpoint) add_checkpoint();
      return false;
    }
    int64_t len = std::min(n - done, B);
    if (K > 0) {
      const int64_t to_boundary = K - n_pos() % K;
      len = std::min(len, to_boundary);
    }
    try {
      std::lock_guard<std::mutex> lock(e->compute_mu);
      eval_tokens(tokens.subspan(static_cast<size_t>(done), static_cast<size_t>(len)));
    } catch (...) {
      reset();  // the model leaves a failed state unusable
      throw;
    }
    done += len;
    if (K > 0 && n_pos() % K == 0) add_checkpoint();
    if (o.progress) o.progress(progress_base + done, progress_total);
  }
  if (end_checkpoint) add_checkpoint();
  return true;
}

EvalResult Session::eval(std::span<const int32_t> tokens, const EvalOptions& o) {
  Impl& s = *impl_;
  s.check_fits(s.n_pos() + static_cast<int64_t>(tokens.size()));
  s.check_ids(tokens);
  EvalResult r;
  r.reused = s.n_pos();
  const auto t0 = Clock::now();
  const int64_t before = s.n_pos();
  r.cancelled = !s.append(tokens, o, true, 0, static_cast<int64_t>(tokens.size()));
  r.evaluated = s.n_pos() - before;
  r.seconds = since(t0);
  return r;
}

EvalResult Session::sync(std::span<const int32_t> tokens, const EvalOptions& o) {
  Impl& s = *impl_;
  const int64_t want = static_cast<int64_t>(tokens.size());
  s.check_fits(want);
  s.check_ids(tokens);
  const auto& cur = s.tokens();
  int64_t p = 0;
  const int64_t lim = std::min<int64_t>(want, s.n_pos());
  while (p < lim && cur[static_cast<size_t>(p)] == tokens[static_cast<size_t>(p)]) ++p;

  EvalResult r;
  r.reused = p;
  const auto t0 = Clock::now();
  if (p == want && p == s.n_pos()) return r;
  if (p < s.n_pos()) s.restore_at_most(p);
  const int64_t from = s.n_pos();  // checkpoint <= p: tokens [from, p) are replayed
  // Replay and new tokens go through in one pass: the same chunking as any other append.
  r.cancelled = !s.append(tokens.subspan(static_cast<size_t>(from)), o, true, 0, want - from);
  r.replayed = std::min(s.n_pos(), p) - from;
  r.evaluated = std::max<int64_t>(0, s.n_pos() - p);
  r.seconds = since(t0);
  return r;
}

int64_t Session::rewind(int64_t n) {
  Impl& s = *impl_;
  if (n < 0 || n > s.n_pos()) fail("rewind to {}: the session holds {} tokens", n, s.n_pos());
  if (n == s.n_pos()) return 0;
  std::vector<int32_t> keep(s.tokens().begin(), s.tokens().begin() + n);
  s.restore_at_most(n);
  const int64_t from = s.n_pos();
  s.append(std::span<const int32_t>(keep).subspan(static_cast<size_t>(from)), EvalOptions{}, true, 0, n - from);
  return n - from;
}

void Session::set_sampler(const SamplerConfig& c) { impl_->sampler = Sampler(c); }
Sampler& Session::sampler() { return impl_->sampler; }

int32_t Session::sample(const SampleOptions& o) {
  if (impl_->n_pos() == 0) fail("sample: the session is empty (evaluate a prompt first)");
  return impl_->sampler.sample(impl_->logits(), o);
}

Logprobs Session::logprobs(int32_t chosen, int32_t n_top) const {
  if (impl_->n_pos() == 0) fail("logprobs: the session is empty (evaluate a prompt first)");
  return compute_logprobs(impl_->logits(), chosen, n_top);
}

}  // namespace ds4
