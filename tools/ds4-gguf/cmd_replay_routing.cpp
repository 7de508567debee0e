// ds4-gguf replay-routing: offline cache/prefetch policy evaluation on a routing trace (or the
// benchmark-only synthetic routing source). Kept in its own file so it can move to ds4-bench.
#include <fmt/format.h>

#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "command.h"
#include "core/error.h"
#include "stream/replay.h"

namespace {

using namespace ds4::stream;

int usage() {
  std::fprintf(stderr,
               "usage: ds4-gguf replay-routing (--trace FILE | --synthetic) [options]\n"
               "  --cache LIST        capacities: N slots, P%% of all experts, or a size (8GB, 512MiB; needs\n"
               "                      --record-bytes); default 10%%,28%%,50%%\n"
               "  --policy LIST       lru, hot, belady (default: all three)\n"
               "  --prefetch LIST     none, hash, lookahead, protect, all, or '+' combinations (default none,all)\n"
               "  --record-bytes B    bytes per expert for MB/token and the bound (default 7077888, Flash q2)\n"
               "  --bw GBPS           read bandwidth for the bound t/s = BW / miss bytes per token (default 7)\n"
               "  --decay N           hot policy: counts halve every N tokens (default 256)\n"
               "  --recent N          hot policy: experts selected in the last N tokens go last (default 2; 0: off)\n"
               "  --per-layer         hit rate per layer too\n"
               "  synthetic source:   --tokens N (512) --layers N (43) --experts N (256) --k N (6) --hash-layers N (3)\n"
               "                      --zipf A (0.8) --reuse P (0.3) --guesses N (4) --guess-recall Q (0.5) --seed S\n"
               "                      --write-trace FILE (save the generated trace)\n");
  return 2;
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> v;
  std::stringstream ss(s);
  std::string x;
  while (std::getline(ss, x, ',')) if (!x.empty()) v.push_back(x);
  return v;
}

int cmd_replay_routing(int argc, char** argv) {
  std::string trace_path, write_path;
  bool synthetic = false, per_layer = false;
  SyntheticRouting syn;
  std::vector<std::string> caches = {"10%", "28%", "50%"}, policies = {"lru", "hot", "belady"},
                           prefetch = {"none", "all"};
  double record_bytes = 7077888, bw = 7;
  int decay = EvictionPolicy::kDefaultDecayTokens, recent = EvictionPolicy::kDefaultRecentTokens;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw ds4::Error("replay-routing: " + a + " needs a value");
      return argv[++i];
    };
    try {
      if (a == "--trace") trace_path = value();
      else if (a == "--synthetic") synthetic = true;
      else if (a == "--cache") caches = split(value());
      else if (a == "--policy") policies = split(value());
      else if (a == "--prefetch") prefetch = split(value());
      else if (a == "--record-bytes") record_bytes = std::stod(value());
      else if (a == "--bw") bw = std::stod(value());
      else if (a == "--decay") decay = std::stoi(value());
      else if (a == "--recent") recent = std::stoi(value());
      else if (a == "--per-layer") per_layer = true;
      else if (a == "--tokens") syn.n_tokens = std::stoll(value());
      else if (a == "--layers") syn.n_layer = std::stoll(value());
      else if (a == "--experts") syn.n_expert = std::stoll(value());
      else if (a == "--k") syn.k = std::stoll(value());
      else if (a == "--hash-layers") syn.n_hash_layers = std::stoll(value());
      else if (a == "--zipf") syn.zipf = std::stod(value());
      else if (a == "--reuse") syn.reuse = std::stod(value());
      else if (a == "--guesses") syn.guesses = std::stoll(value());
      else if (a == "--guess-recall") syn.guess_recall = std::stod(value());
      else if (a == "--seed") syn.seed = std::stoull(value());
      else if (a == "--write-trace") write_path = value();
      else if (a == "-h" || a == "--help") return usage();
      else {
        std::fprintf(stderr, "replay-routing: unknown argument '%s'\n", a.c_str());
        return usage();
      }
    } catch (const std::invalid_argument&) {
      std::fprintf(stderr, "replay-routing: bad value for %s\n", a.c_str());
      return 2;
    } catch (const std::out_of_range&) {
      std::fprintf(stderr, "replay-routing: value out of range for %s\n", a.c_str());
      return 2;
    }
  }
  if (synthetic == !trace_path.empty()) return usage();
  try {
    Trace t = synthetic ? synthetic_trace(syn) : read_trace(trace_path);
    if (!write_path.empty()) write_trace(write_path, t);
    const int64_t all = t.header.n_layer * t.header.n_expert;
    fmt::print("routing: {} ({} layers x {} experts, k = {}, {} hash layers); record {} bytes; bound at {} GB/s\n",
               synthetic ? fmt::format("synthetic zipf {} reuse {} guesses {} recall {} seed {}, {} tokens", syn.zipf,
                                       syn.reuse, syn.guesses, syn.guess_recall, syn.seed, syn.n_tokens)
                         : "trace " + trace_path,
               t.header.n_layer, t.header.n_expert, t.header.k, t.header.n_hash_layers, record_bytes, bw);
    fmt::print("hit% = demand selections found cached (prefetched ones count as hits: the replay has no clock);\n"
               "reads/tok = demand misses + prefetch reads; bound = BW / (reads/tok x record bytes) in tokens/s\n");
    fmt::print("{:>8} {:>6} {:>7} {:>18} {:>8} {:>10} {:>10} {:>9} {:>8} {:>9} {:>7}\n", "cache", "slots", "policy",
               "prefetch", "hit%", "miss/tok", "reads/tok", "MB/tok", "bound", "coverage", "waste/u");
    for (const auto& cs : caches) {
      int64_t slots = 0;
      if (cs.back() == '%') slots = static_cast<int64_t>(std::stod(cs.substr(0, cs.size() - 1)) / 100.0 * all + 0.5);
      else if (cs.find_first_not_of("0123456789") == std::string::npos) slots = std::stoll(cs);
      else {
        size_t i = cs.find_first_not_of("0123456789.");
        double v = std::stod(cs.substr(0, i));
        std::string u = cs.substr(i);
        double mul = u == "GB" ? 1e9 : u == "GiB" ? 1073741824.0 : u == "MB" ? 1e6 : u == "MiB" ? 1048576.0 : 0;
        if (mul == 0) throw ds4::Error("replay-routing: bad --cache entry '" + cs + "'");
        slots = static_cast<int64_t>(v * mul / record_bytes);
      }
      for (const auto& ps : policies) {
        for (const auto& pf : prefetch) {
          ReplayConfig c;
          c.slots = slots;
          c.decay_tokens = decay;
          c.recent_tokens = recent;
          if (ps == "belady") {
            if (pf != "none") continue;  // the optimum is a demand-only ceiling
            c.belady = true;
          } else {
            c.policy = parse_policy(ps);
          }
          for (const auto& part : [&] {
                 std::vector<std::string> v;
                 std::stringstream ss(pf);
                 std::string x;
                 while (std::getline(ss, x, '+')) v.push_back(x);
                 return v;
               }()) {
            if (part == "none") continue;
            else if (part == "hash") c.prefetch_hash = true;
            else if (part == "lookahead") c.prefetch_lookahead = true;
            else if (part == "protect") c.protect = true;
            else if (part == "all") c.prefetch_hash = c.prefetch_lookahead = c.protect = true;
            else throw ds4::Error("replay-routing: unknown prefetch '" + part + "'");
          }
          ReplayResult r = replay(t, c);
          const double mpt = static_cast<double>(r.misses) / static_cast<double>(r.tokens);
          const double rpt = static_cast<double>(r.misses + r.prefetch_issued) / static_cast<double>(r.tokens);
          const double mb = rpt * record_bytes / 1e6;
          fmt::print("{:>8} {:>6} {:>7} {:>18} {:>8.2f} {:>10.1f} {:>10.1f} {:>9.1f} {:>8.2f} {:>9} {:>7}\n", cs, slots, ps,
                     pf, 100.0 * r.hit_rate(), mpt, rpt, mb, mb > 0 ? bw * 1e3 / mb : 0.0,
                     pf == "none" ? "-" : fmt::format("{:.1f}%", 100.0 * r.coverage()),
                     pf == "none" ? "-" : fmt::format("{:.2f}", r.wasted_per_useful()));
          if (per_layer) {
            std::string s = "    per layer hit%:";
            for (size_t l = 0; l < r.layer_hits.size(); ++l)
              s += fmt::format(" {:.0f}", r.layer_accesses[l] ? 100.0 * r.layer_hits[l] / r.layer_accesses[l] : 0.0);
            fmt::print("{}\n", s);
          }
        }
      }
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "replay-routing: %s\n", e.what());
    return 1;
  }
}

const bool registered = ds4::tools::register_command(
    {"replay-routing", "(--trace FILE | --synthetic) [--cache ..] [--policy ..] [--prefetch ..]   offline expert-cache replay",
     cmd_replay_routing});

}  // namespace
