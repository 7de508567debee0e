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

std::string expert_prometheus(const ExpertCounters& c) {
  std::string o;
  auto line = [&](const char* type, const char* name, const char* help, auto value) {
    o += fmt::format("# HELP {} {}\n# TYPE {} {}\n{} {}\n", name, help, name, type, name, value);
  };
  line("counter", "ds4_expert_tokens_total", "Tokens whose routed experts went through the streaming cache.", c.tokens);
  line("counter", "ds4_expert_hits_total", "Selected experts found in the host cache.", c.hits);
  line("counter", "ds4_expert_inflight_hits_total", "Selected experts found being read by a prefetch.", c.inflight_hits);
  line("counter", "ds4_expert_misses_total", "Selected experts read on demand.", c.misses);
  line("counter", "ds4_expert_evictions_total", "Experts evicted from the host cache.", c.evictions);
  line("counter", "ds4_expert_reads_total", "Expert reads issued (demand and prefetch).", c.reads);
  line("counter", "ds4_expert_read_bytes_total", "Bytes read for experts.", c.bytes_read);
  line("counter", "ds4_expert_prefetch_issued_total", "Prefetch reads issued (hash layers and lookahead).",
       c.prefetch_issued);
  line("counter", "ds4_expert_prefetch_useful_total", "Prefetched experts selected before eviction.", c.prefetch_useful);
  line("counter", "ds4_expert_prefetch_wasted_total", "Prefetched experts evicted unused.", c.prefetch_wasted);
  line("counter", "ds4_expert_stall_seconds_total", "Time the forward pass waited for expert reads.", c.stall_seconds);
  line("gauge", "ds4_expert_cache_budget_bytes", "Host expert cache budget.", c.cache_budget_bytes);
  line("gauge", "ds4_expert_cache_bytes", "Bytes of experts held in the host cache.", c.cache_bytes);
  if (c.gpu_budget_bytes > 0) {
    line("counter", "ds4_expert_gpu_hits_total", "Selected experts found in the gpu tier.", c.gpu_hits);
    line("counter", "ds4_expert_gpu_misses_total", "Selected experts the gpu tier took from the host cache.",
         c.gpu_misses);
    line("counter", "ds4_expert_gpu_evictions_total", "Experts evicted from the gpu tier.", c.gpu_evictions);
    line("counter", "ds4_expert_gpu_transient_total",
         "Experts copied into the gpu tier as transient: not hot enough to displace a cached one.", c.gpu_transient);
    line("counter", "ds4_expert_h2d_bytes_total", "Bytes copied from the host cache into gpu slots.", c.h2d_bytes);
    line("counter", "ds4_expert_host_computed_bytes_total",
         "Bytes of gpu-tier misses computed on the CPU where they sit (--expert-host-compute).", c.host_computed_bytes);
    line("gauge", "ds4_expert_gpu_budget_bytes", "Gpu tier budget.", c.gpu_budget_bytes);
    line("gauge", "ds4_expert_gpu_bytes", "Bytes of gpu slots holding an expert.", c.gpu_bytes);
  }
  return o;
}

}  // namespace ds4::server
