#pragma once
// The inference worker: one thread owns the live model session and runs queued jobs one at a
// time. HTTP threads parse, render and tokenize, then submit a Job and read its events.
//
// A job's events arrive in order on its own channel; the last one is Done or Failed, after
// which the worker never touches the job again (finished() is true). Cancellation: set
// `cancel` (or let `client_gone` return true); the worker stops before the next token, or
// between prefill chunks, and ends the job with Done(Cancelled).
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "chat/tool_block_cache.h"
#include "server/debug_script.h"
#include "server/gen_types.h"
#include "server/inference_model.h"
#include "server/metrics.h"

namespace ds4::server {

// Tool-call id → sampled DSML block, shared by HTTP threads (lookup) and the worker (record).
class SharedToolCache {
 public:
  explicit SharedToolCache(size_t capacity) : cache_(capacity) {}
  void put(const std::vector<std::string>& ids, std::string block) {
    std::lock_guard lk(mu_);
    cache_.put(ids, std::move(block));
  }
  std::optional<std::string> get_all(const std::vector<std::string>& ids) {
    std::lock_guard lk(mu_);
    return cache_.get_all(ids);
  }
  // Blocks occurring in `text` with their ids (what a disk KV cache file of it should keep).
  std::vector<std::pair<std::vector<std::string>, std::string>> blocks_in(std::string_view text) {
    std::lock_guard lk(mu_);
    return cache_.blocks_in(text);
  }

 private:
  std::mutex mu_;
  chat::ToolBlockCache cache_;
};

class Job {
 public:
  GenRequest req;
  std::string prompt_text;      // rendered prompt (or the raw prompt)
  std::vector<int32_t> prompt;  // its tokens
  bool starts_in_reasoning = false;
  int64_t max_tokens = 0;       // resolved limit
  std::atomic<bool> cancel{false};
  std::function<bool()> client_gone;  // polled by the worker before each token; may be empty

  void push(GenEvent e);
  // Waits up to `timeout` for events; moves them into `out`. Returns true when any arrived.
  bool wait_events(std::vector<GenEvent>& out, std::chrono::milliseconds timeout);
  void mark_finished();
  bool finished() const;
  void wait_finished();

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<GenEvent> events_;
  bool finished_ = false;
};

struct WorkerOptions {
  size_t max_queue = 64;
  int64_t debug_prefill_delay_ms = 0;  // TEST SCAFFOLDING: sleep per prefilled token
  const DebugScript* debug_script = nullptr;  // TEST SCAFFOLDING
  bool record_tool_blocks = true;
};

class Worker {
 public:
  Worker(InferenceModel& model, WorkerOptions opts, Metrics& metrics, SharedToolCache& tools);
  ~Worker();  // stops the thread; queued jobs end with Failed(503)

  // False when the queue is full.
  bool submit(std::shared_ptr<Job> job);
  // Removes a job that has not started; it ends with Done(Cancelled). False when running/done.
  bool withdraw(const std::shared_ptr<Job>& job);
  size_t queue_length() const;

 private:
  void loop();
  void run(Job& job);
  void update_gauges();

  InferenceModel& model_;
  WorkerOptions opts_;
  Metrics& metrics_;
  SharedToolCache& tools_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  bool active_ = false;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace ds4::server
