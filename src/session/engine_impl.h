#pragma once
// Internal: what an Engine holds (include/ds4/engine.h).
#include <memory>
#include <mutex>
#include <optional>

#include "compute/backend.h"
#include "core/thread_pool.h"
#include "gguf/gguf.h"
#include "ds4/engine.h"
#include "model/deepseek4/model.h"
#include "model/qwen35moe/model.h"
#include "session/analysis.h"
#include "session/steering.h"
#include "stream/provider.h"
#include "stream/setup.h"
#include "stream/synthetic_routing.h"

namespace ds4 {

struct Engine::Impl {
  // The provider's gpu tier lives in shared_backend's memory, and shared_backend goes first
  // (members die in reverse order): let go of the tier while the backend is alive.
  ~Impl() {
    if (experts) experts->detach_device();
  }
  EngineOptions options;
  EngineInfo info;
  MemoryPlan plan;
  uint64_t model_hash = 0;  // XXH64 behind info.model_id
  std::unique_ptr<stream::ExpertProvider> experts;  // null: resident; outlives the model
  std::unique_ptr<stream::ZipfRouter> bench_routing;  // EngineOptions::bench_routing; outlives the model
  // Exactly one of these is set, chosen by the file's general.architecture.
  std::unique_ptr<model::deepseek4::Model> model;
  std::unique_ptr<model::qwen35moe::Model> qwen;
  std::optional<Tokenizer> tokenizer;
  std::optional<steer::Directions> steering;  // EngineOptions::dir_steering_file
  uint64_t steering_id = 0;                   // XXH64 of that file's bytes (EngineInfo::steering_id)
  std::unique_ptr<ThreadPool> pool;
  // Expert host compute (EngineOptions::expert_host_compute): the CPU backend, over `pool`,
  // that computes the gpu tier's misses where they sit (null: every expert on the session's
  // backend). Dies before the pool; the model only points at it.
  std::unique_ptr<compute::Backend> expert_host_backend;
  // Device backends hold the weights once: every session shares this instance (null: each
  // session makes its own CPU backend over `pool`).
  std::unique_ptr<compute::Backend> shared_backend;
  std::unique_ptr<session::Analysis> analysis;  // null: no analysis requested (sessions run unwrapped)
  // One CPU pool serves every session: their evaluations take turns.
  mutable std::mutex compute_mu;
};

namespace session {
// Model identity: XXH64 (seed 0) over the file's bytes before the tensor data (header,
// metadata, tensor table), then for each tensor in table order its first and last
// kTensorSampleBytes bytes (the whole tensor when shorter; head and tail never overlap).
inline constexpr uint64_t kTensorSampleBytes = 4096;
uint64_t model_identity_hash(const gguf::File& file);
// The streaming request as the options give it (--ssd-streaming, the budgets, policy, I/O,
// prefetch switches, packed file, trace), before the residency plan adjusts it: one mapping for
// Engine::open and the ds4 tool's logits dump, which builds its model without an engine.
stream::StreamingRequest streaming_request(const EngineOptions& o);
// Whether a device backend will stream this file's routed experts: --ssd-streaming, or experts
// freed from the GGUF by pack-experts (the residency plan's two reasons on a device). Decides
// the default chunk (default_max_batch) before the plan is made.
bool device_streams_experts(const gguf::File& file, const EngineOptions& o);
}  // namespace session

}  // namespace ds4
