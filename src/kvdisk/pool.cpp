#include "kvdisk/pool.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "core/error.h"

namespace ds4::kvdisk {

namespace {

int64_t common_prefix(const std::vector<int32_t>& a, std::span<const int32_t> b) {
  const size_t n = std::min(a.size(), b.size());
  size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return static_cast<int64_t>(i);
}

}  // namespace

int sessions_that_fit(const MemoryPlan& plan, int max_checkpoints, uint64_t available_bytes, int wanted) {
  const uint64_t per = plan.state_bytes_at_ctx + static_cast<uint64_t>(std::max(0, max_checkpoints)) * plan.checkpoint_bytes;
  if (wanted < 1) wanted = 1;
  if (per == 0) return wanted;
  const uint64_t fit = available_bytes / 2 / per;
  return static_cast<int>(std::clamp<uint64_t>(fit, 1, static_cast<uint64_t>(wanted)));
}

SessionPool::SessionPool(std::shared_ptr<const Engine> engine, PoolOptions o, Store* store)
    : engine_(std::move(engine)), opt_(std::move(o)), store_(store) {
  if (opt_.max_sessions < 1) fail("kv cache: max sessions {} must be at least 1", opt_.max_sessions);
  const SavePolicy& p = opt_.policy;
  if (p.min_tokens < 1 || p.cold_max_tokens < 0 || p.continued_interval < 0 || p.boundary_trim < 0 ||
      p.boundary_align < 0)
    fail("kv cache: invalid save policy (min {}, cold max {}, interval {}, trim {}, align {})", p.min_tokens,
         p.cold_max_tokens, p.continued_interval, p.boundary_trim, p.boundary_align);
  if (store_ && !engine_->info().has_tokenizer) fail("kv cache: the model has no tokenizer (the cache keys on text)");
}

void SessionPool::log(const std::string& m) const {
  if (opt_.log) opt_.log(m);
}

int64_t SessionPool::n_ctx() const { return opt_.session.n_ctx > 0 ? opt_.session.n_ctx : engine_->info().n_ctx; }

Session& SessionPool::current() {
  if (current_ < 0) {
    if (slots_.empty()) slots_.push_back(Slot{engine_->new_session(opt_.session), 0, 0});
    current_ = 0;
  }
  return *slots_[static_cast<size_t>(current_)].session;
}

PoolStats SessionPool::stats() const { return PoolStats{live_.load(), ram_evictions_.load()}; }

int64_t SessionPool::boundary(int64_t n) const {
  const SavePolicy& p = opt_.policy;
  int64_t q = n - p.boundary_trim;
  if (p.boundary_align > 0) {
    const int64_t a = q / p.boundary_align * p.boundary_align;
    if (a >= p.min_tokens) q = a;
  }
  return q;
}

void SessionPool::save_state(Session& s, SaveReason reason) {
  if (!store_ || s.n_past() < opt_.policy.min_tokens) return;
  const std::string text = engine_->tokenizer().decode(s.tokens());
  if (store_->contains(Sha1::of(text))) return;  // this prefix is on disk already
  const std::vector<uint8_t> payload = s.save_payload();
  std::vector<ToolEntry> tools;
  if (opt_.tools_for) tools = opt_.tools_for(text);
  if (store_->save(reason, text, static_cast<uint64_t>(s.n_past()), static_cast<uint64_t>(s.n_ctx()), payload, tools))
    log(fmt::format("saved {} tokens ({})", s.n_past(), to_string(reason)));
}

void SessionPool::save_at(Slot& slot, int64_t n, SaveReason reason) {
  Session& s = *slot.session;
  n = std::min(n, s.n_past());
  if (!store_ || n < opt_.policy.min_tokens) return;
  if (n < s.n_past()) {
    const std::string text = engine_->tokenizer().decode(std::span<const int32_t>(s.tokens()).first(static_cast<size_t>(n)));
    if (store_->contains(Sha1::of(text))) return;
    s.rewind(n);  // lands on the checkpoint sync() left there (no re-evaluation) unless thinned
  }
  save_state(s, reason);
}

int SessionPool::choose(std::span<const int32_t> prompt, bool& continuing) {
  int best = -1;
  int64_t best_c = 0;
  for (size_t i = 0; i < slots_.size(); ++i) {
    const Slot& sl = slots_[i];
    const int64_t c = common_prefix(sl.session->tokens(), prompt);
    const int64_t stable = sl.last_prompt > 0 ? sl.last_prompt : sl.session->n_past();
    if (c == 0 || 2 * c < stable) continue;
    if (best < 0 || c > best_c || (c == best_c && sl.last_used > slots_[static_cast<size_t>(best)].last_used)) {
      best = static_cast<int>(i);
      best_c = c;
    }
  }
  continuing = best >= 0;
  if (best >= 0) return best;
  for (size_t i = 0; i < slots_.size(); ++i)
    if (slots_[i].session->n_past() == 0) return static_cast<int>(i);
  if (static_cast<int>(slots_.size()) < opt_.max_sessions) {
    slots_.push_back(Slot{engine_->new_session(opt_.session), 0, 0});
    return static_cast<int>(slots_.size() - 1);
  }
  size_t lru = 0;
  for (size_t i = 1; i < slots_.size(); ++i)
    if (slots_[i].last_used < slots_[lru].last_used) lru = i;
  Slot& v = slots_[lru];
  save_at(v, v.last_prompt - opt_.policy.boundary_trim, SaveReason::Evict);
  ++ram_evictions_;
  return static_cast<int>(lru);
}

PoolSync SessionPool::sync(std::span<const int32_t> prompt, const EvalOptions& eo) {
  const int64_t N = static_cast<int64_t>(prompt.size());
  if (N > n_ctx()) throw ContextOverflow(n_ctx(), N);
  const SavePolicy& P = opt_.policy;
  bool continuing = false;
  const int idx = choose(prompt, continuing);
  Slot& slot = slots_[static_cast<size_t>(idx)];
  Session& s = *slot.session;
  current_ = idx;
  PoolSync r;
  r.new_conversation = !continuing;

  int64_t c = common_prefix(s.tokens(), prompt);
  if (store_ && N >= P.min_tokens && c + P.boundary_trim < N) {
    auto m = store_->longest_prefix(prompt, engine_->tokenizer(), static_cast<uint64_t>(std::max(P.min_tokens, c + 1)),
                                    static_cast<uint64_t>(N));
    bool used = false;
    if (m) {
      if (auto d = store_->load(m->key)) {
        bool loaded = false;
        try {
          s.load_payload(d->payload);
          loaded = true;
        } catch (const Error& e) {
          store_->discard(m->key, e.what());
        }
        if (loaded && common_prefix(s.tokens(), prompt) == static_cast<int64_t>(m->n_tokens) &&
            s.n_past() == static_cast<int64_t>(m->n_tokens)) {
          used = true;
          r.from_disk = s.n_past();
          if (opt_.restore_tools && !d->tools.empty()) opt_.restore_tools(d->tools);
          log(fmt::format("loaded {} tokens from {}", r.from_disk, store_->path_of(m->key)));
        }
      }
    }
    if (!used && !continuing) store_->note_miss();  // a continuing one is served from RAM anyway
    c = common_prefix(s.tokens(), prompt);
  }
  r.reused = c;

  // Split points: 0 = plain split (a checkpoint for evict / shutdown saves), else a save reason.
  std::map<int64_t, int> points;
  if (store_ && P.boundary_trim > 0 && N - P.boundary_trim > c) points[N - P.boundary_trim] = 0;
  if (!continuing && store_ && P.cold_max_tokens > 0 && N <= P.cold_max_tokens) {
    const int64_t q = boundary(N);
    if (q >= P.min_tokens && q > c) points[q] = static_cast<int>(SaveReason::Cold);
  }
  if (store_ && P.continued_interval > 0) {
    for (int64_t f = (c / P.continued_interval + 1) * P.continued_interval; f <= N; f += P.continued_interval)
      if (f >= P.min_tokens) points[f] = static_cast<int>(SaveReason::Continued);
  }
  if (!points.count(N)) points[N] = 0;

  const int64_t total = N - c;
  int64_t base = 0;
  for (const auto& [q, why] : points) {
    EvalOptions sub = eo;
    if (eo.progress) sub.progress = [&, b = base](int64_t d, int64_t) { eo.progress(std::min(total, b + d), total); };
    const EvalResult er = s.sync(prompt.first(static_cast<size_t>(q)), sub);
    r.evaluated += er.evaluated + er.replayed;
    r.seconds += er.seconds;
    base += er.evaluated;
    if (er.cancelled) {
      r.cancelled = true;
      break;
    }
    if (why != 0) save_state(s, static_cast<SaveReason>(why));
  }
  slot.last_prompt = N;
  slot.last_used = ++clock_;
  int64_t live = 0;
  for (const auto& sl : slots_) live += sl.session->n_past() > 0 ? 1 : 0;
  live_ = live;
  return r;
}

void SessionPool::after_append() {
  if (current_ < 0 || !store_ || opt_.policy.continued_interval <= 0) return;
  Session& s = *slots_[static_cast<size_t>(current_)].session;
  if (s.n_past() % opt_.policy.continued_interval == 0) save_state(s, SaveReason::Continued);
}

void SessionPool::save_all(SaveReason reason) {
  if (!store_) return;
  for (auto& sl : slots_) {
    if (sl.session->n_past() == 0) continue;
    try {
      save_at(sl, (sl.last_prompt > 0 ? sl.last_prompt : sl.session->n_past()) - opt_.policy.boundary_trim, reason);
    } catch (const Error& e) {
      log(fmt::format("not saved: {}", e.what()));
    }
  }
}

}  // namespace ds4::kvdisk
