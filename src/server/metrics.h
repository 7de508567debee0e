#pragma once
// Server counters, exported in the Prometheus text format by GET /metrics.
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "ds4/engine.h"

namespace ds4::server {

class Metrics {
 public:
  void count_request(const std::string& endpoint, int status);
  // One job's prompt: all its tokens, those reused from the live session, those prefilled.
  void add_prompt(int64_t prompt_tokens, int64_t cached_tokens, int64_t prefilled_tokens, double prefill_seconds);
  void add_generation(int64_t tokens, double seconds);
  void set_queue(int64_t queued, int64_t active);
  void count_cancelled();
  std::string prometheus() const;
  // Appends another source's lines (e.g. the model's sessions and disk cache) to prometheus().
  void set_extra(std::function<std::string()> extra);

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;
  uint64_t prompt_tokens_ = 0, cached_tokens_ = 0, prefilled_tokens_ = 0, generated_tokens_ = 0;
  double prefill_seconds_ = 0, generation_seconds_ = 0;
  double last_prefill_tps_ = 0, last_generation_tps_ = 0;
  uint64_t cancelled_ = 0;
  int64_t queued_ = 0, active_ = 0;
  std::function<std::string()> extra_;
};

// The expert-streaming counters (Engine::expert_counters) in the Prometheus text format:
// ds4_expert_* counters and the cache gauges.
std::string expert_prometheus(const ExpertCounters& c);

}  // namespace ds4::server
