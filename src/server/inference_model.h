#pragma once
// What the server's worker needs from a model: a narrow interface so the queue, generation
// loop and protocol layers can be tested with a scripted fake, and the real implementation
// (session_model.cpp) is a thin adapter over ds4::Engine / ds4::Session.
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ds4/sampling.h"

namespace ds4 {
class Engine;
}

namespace ds4::server {

class SharedToolCache;

struct SyncStats {
  int64_t reused = 0;     // prompt tokens not prefilled: kept in a live session or loaded from disk
  int64_t evaluated = 0;  // tokens prefilled by this call
  bool cancelled = false;
  double seconds = 0;
  int64_t from_disk = 0;  // of `reused`, tokens loaded from the disk KV cache
};

class InferenceModel {
 public:
  virtual ~InferenceModel() = default;

  // Safe from any thread.
  virtual int64_t n_ctx() const = 0;
  virtual std::vector<int32_t> encode(std::string_view text, bool parse_special) const = 0;
  virtual std::string piece(int32_t id) const = 0;
  virtual bool is_stop(int32_t id) const = 0;
  virtual std::string model_name() const = 0;
  // Extra Prometheus lines for /metrics (sessions, disk cache); may be empty.
  virtual std::string prometheus() const { return {}; }

  // Worker thread only.
  virtual const std::vector<int32_t>& tokens() const = 0;
  // Makes the live tokens equal `tokens`, evaluating only what differs from the current ones.
  virtual SyncStats sync(std::span<const int32_t> tokens, const std::atomic<bool>* cancel) = 0;
  virtual void set_sampler(const SamplerConfig& config) = 0;
  virtual int32_t sample(const SampleOptions& options) = 0;
  virtual Logprobs logprobs(int32_t chosen, int32_t n_top) const = 0;
  virtual void append(int32_t id) = 0;  // evaluates one token after tokens()
  // Called once after the worker has stopped (clean exit): persist what should survive.
  virtual void shutdown() {}
};

// The engine-backed implementation: up to max_sessions live sessions, routed by longest common
// prefix, backed by the disk KV cache when kv_disk_dir is set (src/kvdisk/pool.h).
struct SessionModelOptions {
  int64_t n_ctx = 0;
  int max_sessions = 1;
  std::string kv_disk_dir;        // empty: no disk cache
  int64_t kv_disk_space_mb = 4096;
  int64_t min_tokens = 512, cold_max_tokens = 30000, continued_interval = 10000;
  int64_t boundary_trim = 32, boundary_align = 2048;
  SharedToolCache* tools = nullptr;  // tool-call blocks saved with / restored from files
};
std::unique_ptr<InferenceModel> make_session_model(std::shared_ptr<const Engine> engine, const SessionModelOptions& o);

}  // namespace ds4::server
