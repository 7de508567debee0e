#pragma once
// Residency planner: keep the model resident when it safely fits in the memory the engine may
// use, otherwise stream the routed experts through a host cache sized from what is left, and
// refuse what cannot run (issue 14's AUTO / --resident / --ssd-streaming). A pure function of
// its inputs, so the rules are tested without a machine of each size; host_available_bytes()
// reads the machine.
#include <cstdint>
#include <string>

namespace ds4::stream {

enum class Residency { Auto, Resident, Streaming };

struct MemoryNeeds {
  uint64_t weights_bytes = 0;      // every tensor's data
  uint64_t expert_bytes = 0;       // the routed experts among them (what streaming moves out)
  uint64_t session_bytes = 0;      // one session's state at the context size, with a checkpoint;
                                   // the plan counts it `sessions` times
  uint64_t scratch_bytes = 0;      // activations and temporaries (an estimate)
  uint64_t token_working_set = 0;  // one token's experts: the smallest cache that can run
  int sessions = 1;                // live sessions counted (ds4-server keeps --max-sessions of them)
};

struct ResidencyRequest {
  Residency mode = Residency::Auto;
  uint64_t available_bytes = 0;  // memory the plan may use (MemAvailable, or --host-memory-gib)
  uint64_t reserve_bytes = 0;    // kept free for everything else (--memory-reserve-gib)
  uint64_t host_budget = 0;      // --expert-cache-host in bytes; 0: sized by the plan
  bool experts_freed = false;    // the GGUF's experts live only in its packed file
};

struct ResidencyPlan {
  bool stream = false;
  uint64_t host_cache_bytes = 0;  // streaming: the cache budget (the request's, or the plan's;
                                  // at most expert_bytes, which means "every expert")
  std::string describe;           // one line for the plan printed at start
};

// Throws ds4::Error with the figures when the request cannot run: --resident when the model
// plus state, scratch and reserve exceed the available memory (or its experts were freed);
// streaming when what is left for the cache is below one token's working set.
ResidencyPlan plan_residency(const MemoryNeeds& need, const ResidencyRequest& req);

// MemAvailable from /proc/meminfo (bytes); 0 when it cannot be read.
uint64_t host_available_bytes();

}  // namespace ds4::stream
