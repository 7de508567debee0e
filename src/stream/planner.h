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

// The device tier of the expert cache (device_tier.h), planned once the non-expert weights are
// on the device: --expert-cache-gpu as given, else what the device's free memory leaves after
// the sessions' state, scratch and a reserve. Its floor is one layer's experts for one token
// (experts_per_token slots): the tier must hold the experts one layer computes at once; below
// the whole token's working set it still runs, every other layer's experts coming from the
// host tier over the link (the host tier's floor, n_layer x experts_per_token, keeps disk
// reads from thrashing within a token).
struct DeviceTierRequest {
  std::string given;            // --expert-cache-gpu as written ("" = size it)
  uint64_t budget_bytes = 0;    // parsed from `given` (bytes), or
  int64_t budget_slots = 0;     // slots
  uint64_t free_bytes = 0;      // device memory free now
  uint64_t session_bytes = 0;   // every planned session's state (device memory)
  uint64_t scratch_bytes = 0;   // activations and temporaries
  uint64_t reserve_bytes = 0;   // kept free for the backend's own buffers
  uint64_t slot_bytes = 0;      // one slot: the largest expert's host slot
  uint64_t expert_count = 0;    // every expert (layers x experts): more slots are never useful
  int64_t experts_per_token = 1;
};

struct DeviceTierPlan {
  int64_t slots = 0;
  std::string describe;  // one line for the plan printed at start
};

// Throws ds4::Error with the figures below the floor or when a given budget does not fit.
DeviceTierPlan plan_device_tier(const DeviceTierRequest& r);

// MemAvailable from /proc/meminfo (bytes); 0 when it cannot be read.
uint64_t host_available_bytes();

}  // namespace ds4::stream
