// The residency planner's rules (stream/planner.h) on hand-computed figures.
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "stream/planner.h"

namespace ds4::stream {
namespace {

// weights 100 (experts 80), session 5, scratch 5, one token's experts 10.
MemoryNeeds needs() { return {100, 80, 5, 5, 10}; }

ResidencyRequest request(Residency m, uint64_t avail, uint64_t reserve = 10) {
  ResidencyRequest r;
  r.mode = m;
  r.available_bytes = avail;
  r.reserve_bytes = reserve;
  return r;
}

std::string error_of(const MemoryNeeds& n, const ResidencyRequest& r) {
  try {
    plan_residency(n, r);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Planner, AutoStaysResidentWhenEverythingFits) {
  // 100 + 5 + 5 + 10 = 120 fits in exactly 120.
  const ResidencyPlan p = plan_residency(needs(), request(Residency::Auto, 120));
  EXPECT_FALSE(p.stream);
  EXPECT_NE(p.describe.find("resident, chosen automatically"), std::string::npos) << p.describe;
}

TEST(Planner, AutoStreamsWithTheCacheThatIsLeft) {
  // Resident needs 120 > 60. Non-expert part 20 + session 5 + scratch 5 + reserve 10 = 40,
  // so 60 - 40 = 20 bytes are left for the cache (>= 10, one token's experts).
  const ResidencyPlan p = plan_residency(needs(), request(Residency::Auto, 60));
  EXPECT_TRUE(p.stream);
  EXPECT_EQ(p.host_cache_bytes, 20u);
  EXPECT_NE(p.describe.find("does not fit resident"), std::string::npos) << p.describe;
}

TEST(Planner, TheCacheNeverExceedsTheExperts) {
  const ResidencyPlan p = plan_residency(needs(), request(Residency::Streaming, 1000));
  EXPECT_TRUE(p.stream);
  EXPECT_EQ(p.host_cache_bytes, 80u);
  EXPECT_NE(p.describe.find("--ssd-streaming"), std::string::npos) << p.describe;
}

TEST(Planner, RefusesACacheBelowOneTokensExperts) {
  // 49 - 40 = 9 < 10.
  const std::string e = error_of(needs(), request(Residency::Auto, 49));
  EXPECT_NE(e.find("below one token's experts"), std::string::npos) << e;
  // 50 - 40 = 10: exactly one token's experts runs.
  EXPECT_EQ(plan_residency(needs(), request(Residency::Auto, 50)).host_cache_bytes, 10u);
}

TEST(Planner, ResidentRefusesWhatDoesNotFit) {
  EXPECT_FALSE(plan_residency(needs(), request(Residency::Resident, 120)).stream);
  const std::string e = error_of(needs(), request(Residency::Resident, 119));
  EXPECT_NE(e.find("--resident: the model does not fit"), std::string::npos) << e;
  EXPECT_NE(e.find("available"), std::string::npos) << e;
}

TEST(Planner, FreedExpertsAlwaysStream) {
  ResidencyRequest r = request(Residency::Auto, 1000);
  r.experts_freed = true;
  const ResidencyPlan p = plan_residency(needs(), r);
  EXPECT_TRUE(p.stream);
  EXPECT_NE(p.describe.find("packed file"), std::string::npos) << p.describe;
  r.mode = Residency::Resident;
  EXPECT_NE(error_of(needs(), r).find("pack-experts"), std::string::npos);
}

TEST(Planner, AGivenBudgetIsKept) {
  ResidencyRequest r = request(Residency::Streaming, 1000);
  r.host_budget = 33;
  EXPECT_EQ(plan_residency(needs(), r).host_cache_bytes, 33u);
}

TEST(Planner, AModelWithoutExpertsThatDoesNotFitIsAnError) {
  MemoryNeeds n = needs();
  n.expert_bytes = 0;
  n.token_working_set = 0;
  EXPECT_NE(error_of(n, request(Residency::Auto, 60)).find("no routed experts"), std::string::npos);
}

TEST(Planner, CountsEverySessionTheServerKeeps) {
  // Three sessions of 5: resident needs 100 + 15 + 5 + 10 = 130, so 120 no longer fits, and the
  // streaming cache shrinks by the two extra sessions: 60 - (20 + 15 + 5 + 10) = 10.
  MemoryNeeds n = needs();
  n.sessions = 3;
  const ResidencyPlan p = plan_residency(n, request(Residency::Auto, 120));
  EXPECT_TRUE(p.stream) << p.describe;
  EXPECT_EQ(plan_residency(n, request(Residency::Auto, 60)).host_cache_bytes, 10u);
  EXPECT_NE(p.describe.find("3 x"), std::string::npos) << p.describe;
  const std::string e = error_of(n, request(Residency::Resident, 120));
  EXPECT_NE(e.find("sessions 3 x"), std::string::npos) << e;
  n.sessions = 0;
  EXPECT_NE(error_of(n, request(Residency::Auto, 120)).find("0 sessions"), std::string::npos);
}

TEST(Planner, ReadsTheMachinesAvailableMemory) {
  // Linux: /proc/meminfo's MemAvailable is there and non-zero on any machine that runs tests.
  EXPECT_GT(host_available_bytes(), 0u);
}

// Expert compute (plan_expert_compute): hand-picked rates on both sides of the rule.
ExpertComputeRequest compute_request(ExpertCompute mode, double cpu, double link) {
  ExpertComputeRequest r;
  r.mode = mode;
  r.cpu_gbps = cpu;
  r.link_gbps = link;
  r.rates_given = true;
  r.expert_bytes = 7077888;  // a Flash q2 expert
  return r;
}

std::string compute_error(const std::string& mode, const std::string& rates) {
  try {
    ExpertComputeRequest r;
    r.mode = parse_expert_compute(mode);
    if (!rates.empty()) parse_expert_compute_rates(rates, r);
    plan_expert_compute(r);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Planner, ExpertComputeAutoTakesTheFasterWay) {
  // The CPU at 30 GB/s against a 25 GB/s link (a PCIe 4 card): 0.236 ms < 0.283 ms, the CPU.
  ExpertComputePlan p = plan_expert_compute(compute_request(ExpertCompute::Auto, 30, 25));
  EXPECT_TRUE(p.host_compute) << p.describe;
  EXPECT_NE(p.describe.find("computed on the CPU"), std::string::npos) << p.describe;
  EXPECT_NE(p.describe.find("auto: the CPU is faster"), std::string::npos) << p.describe;
  EXPECT_NE(p.describe.find("0.236 ms on the CPU at 30.0 GB/s, 0.283 ms over the link at 25.0 GB/s"),
            std::string::npos)
      << p.describe;
  // The other way round, and a tie: copy (a copy also fills the gpu tier).
  p = plan_expert_compute(compute_request(ExpertCompute::Auto, 25, 30));
  EXPECT_FALSE(p.host_compute) << p.describe;
  EXPECT_NE(p.describe.find("copied over the link"), std::string::npos) << p.describe;
  EXPECT_FALSE(plan_expert_compute(compute_request(ExpertCompute::Auto, 30, 30)).host_compute);
}

TEST(Planner, ExpertComputeDefaultsCopyOnTheH200Machine) {
  // Its measured rates (23.6 GB/s CPU, 49.8 GB/s link): copying wins, and the line says whose rates.
  ExpertComputeRequest r;
  r.expert_bytes = 7077888;
  const ExpertComputePlan p = plan_expert_compute(r);
  EXPECT_FALSE(p.host_compute) << p.describe;
  EXPECT_NE(p.describe.find("default rates"), std::string::npos) << p.describe;
}

TEST(Planner, ExpertComputeForcedEitherWay) {
  EXPECT_TRUE(plan_expert_compute(compute_request(ExpertCompute::Cpu, 1, 100)).host_compute);
  EXPECT_FALSE(plan_expert_compute(compute_request(ExpertCompute::Copy, 100, 1)).host_compute);
  EXPECT_NE(plan_expert_compute(compute_request(ExpertCompute::Cpu, 1, 100)).describe.find("--expert-host-compute cpu"),
            std::string::npos);
}

TEST(Planner, ExpertComputeFlagsAreChecked) {
  EXPECT_EQ(parse_expert_compute("cpu"), ExpertCompute::Cpu);
  EXPECT_EQ(parse_expert_compute("copy"), ExpertCompute::Copy);
  EXPECT_EQ(parse_expert_compute("auto"), ExpertCompute::Auto);
  EXPECT_NE(compute_error("gpu", "").find("--expert-host-compute: 'gpu'"), std::string::npos);
  ExpertComputeRequest r;
  parse_expert_compute_rates("30.5,25", r);
  EXPECT_DOUBLE_EQ(r.cpu_gbps, 30.5);
  EXPECT_DOUBLE_EQ(r.link_gbps, 25);
  EXPECT_TRUE(r.rates_given);
  for (const char* bad : {"30", "30,", ",25", "a,b", "0,25", "-1,25", "30,25,1", "30,25x", "inf,1", "nan,1"})
    EXPECT_NE(compute_error("auto", bad).find("--expert-host-compute-rates"), std::string::npos) << bad;
  EXPECT_EQ(compute_error("auto", "30,25"), "");
}

}  // namespace
}  // namespace ds4::stream
