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

// Where a device backend computes the experts its gpu tier misses (issue 14): copied over the
// link into a device slot ("copy"), or on the CPU where they sit in the host cache ("cpu",
// ProviderOptions::host_compute). Either way one expert's bytes are read once per use, by the
// link or by the CPU, so auto compares the two rates: cpu when bytes / cpu rate < bytes / link
// rate (the device's own compute of a copied expert, ~1% of the copy at its memory rate, is
// not counted). Results are bit-identical either way; only the time differs.
enum class ExpertCompute { Auto, Cpu, Copy };

// The default rates, both measured on the H200 machine (ssd-streaming-digest.md §9):
// link: pinned host-to-device copies of one 6.75 MiB Flash expert each, 49.8 GB/s;
// cpu: llama.cpp computing every routed expert on the CPU (-ncmoe 43, 16 threads) decoded
// 12.9 t/s at 1.826 GB of routed experts per token = 23.6 GB/s (a lower bound on the CPU's
// expert rate: that time includes the GPU's share). Other machines: --expert-host-compute-rates.
inline constexpr double kDefaultCpuExpertGBps = 23.6;
inline constexpr double kDefaultLinkGBps = 49.8;

struct ExpertComputeRequest {
  ExpertCompute mode = ExpertCompute::Auto;
  double cpu_gbps = kDefaultCpuExpertGBps;  // expert bytes the CPU computes per second (1e9)
  double link_gbps = kDefaultLinkGBps;      // bytes the host-to-device copies move per second (1e9)
  bool rates_given = false;                 // --expert-host-compute-rates (else the defaults above)
  uint64_t expert_bytes = 0;                // one expert (the largest): for the times printed
};

struct ExpertComputePlan {
  bool host_compute = false;
  std::string describe;  // one line for the plan printed at start: the choice and why
};

// Throws ds4::Error on rates that are not positive and finite.
ExpertComputePlan plan_expert_compute(const ExpertComputeRequest& r);
// "cpu" | "copy" | "auto"; throws ds4::Error naming --expert-host-compute otherwise.
ExpertCompute parse_expert_compute(const std::string& s);
// "CPU_GBPS,LINK_GBPS" (e.g. "30,25"): sets both rates; throws ds4::Error naming the flag.
void parse_expert_compute_rates(const std::string& s, ExpertComputeRequest& r);

// MemAvailable from /proc/meminfo (bytes); 0 when it cannot be read.
uint64_t host_available_bytes();

}  // namespace ds4::stream
