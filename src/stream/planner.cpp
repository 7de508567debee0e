#include "stream/planner.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/human_bytes.h"

namespace ds4::stream {

ResidencyPlan plan_residency(const MemoryNeeds& need, const ResidencyRequest& req) {
  if (need.sessions < 1) fail("residency plan: {} sessions (at least one)", need.sessions);
  const uint64_t sessions_bytes = need.session_bytes * static_cast<uint64_t>(need.sessions);
  const std::string sessions_text = need.sessions == 1 ? fmt::format("session {}", human_bytes(need.session_bytes))
                                                       : fmt::format("sessions {} x {}", need.sessions,
                                                                     human_bytes(need.session_bytes));
  const uint64_t resident_need = need.weights_bytes + sessions_bytes + need.scratch_bytes + req.reserve_bytes;
  const uint64_t avail = req.available_bytes;
  const std::string figures = fmt::format("weights {} + {} + scratch {} + reserve {} = {}; available {}",
                                          human_bytes(need.weights_bytes), sessions_text,
                                          human_bytes(need.scratch_bytes), human_bytes(req.reserve_bytes),
                                          human_bytes(resident_need), human_bytes(avail));
  ResidencyPlan p;
  if (req.mode == Residency::Resident) {
    if (req.experts_freed)
      fail("--resident: this GGUF's routed experts were moved to its packed file (pack-experts); they can only be "
           "streamed (run without --resident, or restore the GGUF with pack-experts --restore)");
    if (resident_need > avail) fail("--resident: the model does not fit: {}", figures);
    p.describe = fmt::format("residency         resident ({})", figures);
    return p;
  }
  if (req.mode == Residency::Auto && !req.experts_freed && resident_need <= avail) {
    p.describe = fmt::format("residency         resident, chosen automatically ({})", figures);
    return p;
  }
  if (need.expert_bytes == 0)
    fail("the model does not fit ({}) and has no routed experts that could be streamed", figures);
  // Streaming: everything but the experts stays, plus one cache.
  p.stream = true;
  const uint64_t non_expert = need.weights_bytes - std::min(need.expert_bytes, need.weights_bytes);
  const uint64_t fixed = non_expert + sessions_bytes + need.scratch_bytes + req.reserve_bytes;
  const char* why = req.mode == Residency::Streaming ? "--ssd-streaming"
                    : req.experts_freed              ? "the experts live in the packed file"
                                                     : "the model does not fit resident";
  if (req.host_budget > 0) {
    p.host_cache_bytes = req.host_budget;
    p.describe = fmt::format("residency         streaming ({}): host cache {} as given; non-expert part {}, available {}",
                             why, human_bytes(req.host_budget), human_bytes(fixed), human_bytes(avail));
    return p;
  }
  const uint64_t left = avail > fixed ? avail - fixed : 0;
  const uint64_t cache = std::min(left, need.expert_bytes);
  if (cache < need.token_working_set)
    fail("not enough memory to run this model ({}): non-expert weights {} + {} + scratch {} + reserve {} "
         "leave {} of {} available for the expert cache, below one token's experts ({})",
         why, human_bytes(non_expert), sessions_text, human_bytes(need.scratch_bytes),
         human_bytes(req.reserve_bytes), human_bytes(left), human_bytes(avail), human_bytes(need.token_working_set));
  p.host_cache_bytes = cache;
  p.describe = fmt::format(
      "residency         streaming ({}): host cache {} of {} experts, sized from {} available minus {} for the rest "
      "({})",
      why, human_bytes(cache), human_bytes(need.expert_bytes), human_bytes(avail), human_bytes(fixed), sessions_text);
  return p;
}

DeviceTierPlan plan_device_tier(const DeviceTierRequest& r) {
  if (r.slot_bytes == 0) fail("internal: device tier plan with 0-byte slots");
  const uint64_t K = static_cast<uint64_t>(std::max<int64_t>(1, r.experts_per_token));
  const uint64_t floor_bytes = K * r.slot_bytes;
  const uint64_t rest = r.session_bytes + r.scratch_bytes + r.reserve_bytes;
  const std::string floor_text = fmt::format("one layer's experts for one token: {} x {} = {}", K,
                                             human_bytes(r.slot_bytes), human_bytes(floor_bytes));
  DeviceTierPlan p;
  uint64_t slots = 0;
  std::string how;
  if (!r.given.empty()) {
    slots = r.budget_slots > 0 ? static_cast<uint64_t>(r.budget_slots) : r.budget_bytes / r.slot_bytes;
    if (slots < K)
      fail("--expert-cache-gpu {}: {} slots of {} is below {}", r.given, slots, human_bytes(r.slot_bytes), floor_text);
    slots = std::min(slots, std::max<uint64_t>(K, r.expert_count));
    const uint64_t need = slots * r.slot_bytes + rest;
    if (need > r.free_bytes)
      fail("--expert-cache-gpu {}: {} slots ({}) + sessions {} + scratch {} + reserve {} = {} exceed the {} of "
           "device memory free after the weights",
           r.given, slots, human_bytes(slots * r.slot_bytes), human_bytes(r.session_bytes),
           human_bytes(r.scratch_bytes), human_bytes(r.reserve_bytes), human_bytes(need), human_bytes(r.free_bytes));
    how = "as given";
  } else {
    const uint64_t left = r.free_bytes > rest ? r.free_bytes - rest : 0;
    slots = std::min(left / r.slot_bytes, std::max<uint64_t>(K, r.expert_count));
    if (slots < K)
      fail("not enough device memory for the gpu expert tier: {} free after the weights, minus sessions {} + scratch "
           "{} + reserve {}, leaves {}, below {} (free device memory, or use a smaller context)",
           human_bytes(r.free_bytes), human_bytes(r.session_bytes), human_bytes(r.scratch_bytes),
           human_bytes(r.reserve_bytes), human_bytes(left), floor_text);
    how = fmt::format("sized from {} free device memory minus {} for sessions, scratch and reserve",
                      human_bytes(r.free_bytes), human_bytes(rest));
  }
  p.slots = static_cast<int64_t>(slots);
  p.describe = fmt::format("gpu tier          {} slots of {} = {} ({}; floor {} slots, {}){}", slots,
                           human_bytes(r.slot_bytes), human_bytes(slots * r.slot_bytes), how, K, floor_text,
                           slots >= r.expert_count ? ", every expert" : "");
  return p;
}

ExpertComputePlan plan_expert_compute(const ExpertComputeRequest& r) {
  for (double v : {r.cpu_gbps, r.link_gbps})
    if (!(v > 0) || !std::isfinite(v)) fail("--expert-host-compute-rates: rate {} GB/s is not a positive number", v);
  const double bytes = static_cast<double>(r.expert_bytes);
  const double t_cpu = bytes / (r.cpu_gbps * 1e9), t_link = bytes / (r.link_gbps * 1e9);
  const std::string figures = fmt::format(
      "one {} expert: {:.3f} ms on the CPU at {:.1f} GB/s, {:.3f} ms over the link at {:.1f} GB/s ({})",
      human_bytes(r.expert_bytes), t_cpu * 1e3, r.cpu_gbps, t_link * 1e3, r.link_gbps,
      r.rates_given ? "--expert-host-compute-rates" : "default rates, measured on the H200 machine");
  ExpertComputePlan p;
  std::string why;
  switch (r.mode) {
    case ExpertCompute::Cpu:
      p.host_compute = true;
      why = "--expert-host-compute cpu";
      break;
    case ExpertCompute::Copy:
      why = "--expert-host-compute copy";
      break;
    case ExpertCompute::Auto:
      // Compared as rates (the bytes cancel); a tie copies: the copy also fills the gpu tier.
      p.host_compute = r.cpu_gbps > r.link_gbps;
      why = p.host_compute ? "auto: the CPU is faster than the link" : "auto: the link is at least as fast as the CPU";
      break;
  }
  p.describe = fmt::format("expert compute    gpu-tier misses {} ({}; {})",
                           p.host_compute ? "computed on the CPU where they sit in the host cache"
                                          : "copied over the link into gpu slots",
                           why, figures);
  return p;
}

ExpertCompute parse_expert_compute(const std::string& s) {
  if (s == "auto") return ExpertCompute::Auto;
  if (s == "cpu") return ExpertCompute::Cpu;
  if (s == "copy") return ExpertCompute::Copy;
  fail("--expert-host-compute: '{}' is not cpu, copy or auto", s);
}

void parse_expert_compute_rates(const std::string& s, ExpertComputeRequest& r) {
  const size_t comma = s.find(',');
  double v[2] = {0, 0};
  bool ok = comma != std::string::npos && s.find(',', comma + 1) == std::string::npos;
  for (int i = 0; ok && i < 2; ++i) {
    const std::string part = i == 0 ? s.substr(0, comma) : s.substr(comma + 1);
    size_t used = 0;
    try {
      v[i] = std::stod(part, &used);
    } catch (...) {
      ok = false;
    }
    ok = ok && used == part.size() && v[i] > 0 && std::isfinite(v[i]);
  }
  if (!ok)
    fail("--expert-host-compute-rates: '{}' is not CPU_GBPS,LINK_GBPS (two positive numbers in GB/s, e.g. 30,25)", s);
  r.cpu_gbps = v[0];
  r.link_gbps = v[1];
  r.rates_given = true;
}

uint64_t host_available_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("MemAvailable:", 0) != 0) continue;
    std::istringstream ss(line.substr(13));
    uint64_t kb = 0;
    std::string unit;
    if (ss >> kb >> unit && unit == "kB") return kb * 1024;
    return 0;
  }
  return 0;
}

}  // namespace ds4::stream
