#include "server/metrics.h"

#include <fmt/format.h>

namespace ds4::server {

void Metrics::count_request(const std::string& endpoint, int status) {
  std::lock_guard lk(mu_);
  ++requests_[{endpoint, status}];
}

void Metrics::add_prompt(int64_t prompt_tokens, int64_t cached_tokens, int64_t prefilled_tokens,
                         double prefill_seconds) {
  std::lock_guard lk(mu_);
  prompt_tokens_ += static_cast<uint64_t>(prompt_tokens);
  cached_tokens_ += static_cast<uint64_t>(cached_tokens);
  prefilled_tokens_ += static_cast<uint64_t>(prefilled_tokens);
  prefill_seconds_ += prefill_seconds;
  if (prefilled_tokens > 0 && prefill_seconds > 0) last_prefill_tps_ = prefilled_tokens / prefill_seconds;
}

void Metrics::add_generation(int64_t tokens, double seconds) {
  std::lock_guard lk(mu_);
  generated_tokens_ += static_cast<uint64_t>(tokens);
  generation_seconds_ += seconds;
  if (tokens > 0 && seconds > 0) last_generation_tps_ = tokens / seconds;
}

void Metrics::set_queue(int64_t queued, int64_t active) {
  std::lock_guard lk(mu_);
  queued_ = queued;
  active_ = active;
}

void Metrics::count_cancelled() {
  std::lock_guard lk(mu_);
  ++cancelled_;
}

void Metrics::set_extra(std::function<std::string()> extra) {
  std::lock_guard lk(mu_);
  extra_ = std::move(extra);
}

std::string Metrics::prometheus() const {
  std::lock_guard lk(mu_);
  std::string o;
  o += "# HELP ds4_requests_total HTTP requests by endpoint and status.\n# TYPE ds4_requests_total counter\n";
  for (const auto& [k, v] : requests_) {
    o += fmt::format("ds4_requests_total{{endpoint=\"{}\",status=\"{}\"}} {}\n", k.first, k.second, v);
  }
  auto counter = [&](const char* name, const char* help, auto value) {
    o += fmt::format("# HELP {} {}\n# TYPE {} counter\n{} {}\n", name, help, name, name, value);
  };
  auto gauge = [&](const char* name, const char* help, auto value) {
    o += fmt::format("# HELP {} {}\n# TYPE {} gauge\n{} {}\n", name, help, name, name, value);
  };
  counter("ds4_prompt_tokens_total", "Prompt tokens of finished prefills.", prompt_tokens_);
  counter("ds4_prompt_cached_tokens_total", "Prompt tokens not prefilled (kept in RAM or loaded from disk).", cached_tokens_);
  counter("ds4_prompt_prefilled_tokens_total", "Prompt tokens evaluated (the new suffixes).", prefilled_tokens_);
  counter("ds4_generated_tokens_total", "Tokens sampled.", generated_tokens_);
  counter("ds4_prefill_seconds_total", "Time spent prefilling.", prefill_seconds_);
  counter("ds4_generation_seconds_total", "Time spent generating.", generation_seconds_);
  counter("ds4_cancelled_total", "Generations cancelled by a client disconnect.", cancelled_);
  gauge("ds4_prefill_tokens_per_second", "Prefill speed of the last prefill.", last_prefill_tps_);
  gauge("ds4_generation_tokens_per_second", "Generation speed of the last generation.", last_generation_tps_);
  gauge("ds4_queue_length", "Jobs waiting for the inference worker.", queued_);
  gauge("ds4_active_jobs", "Jobs the inference worker is running (0 or 1).", active_);
  if (extra_) o += extra_();
  return o;
}

}  // namespace ds4::server
