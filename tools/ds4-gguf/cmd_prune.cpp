// ds4-gguf prune --profile FILE (--keep-fraction F | --min-share S) [--random SEED] --out MASK
#include <cstdio>
#include <string>

#include "command.h"
#include "core/error.h"
#include "quantize/expert_profile.h"

namespace {

int usage() {
  std::fprintf(stderr,
               "usage: ds4-gguf prune --profile FILE (--keep-fraction F | --min-share S) [--random SEED] --out MASK\n"
               "  writes a prune mask for `ds4 --prune-mask` / `ds4-eval --prune-mask` (experts kept out of routing)\n"
               "  or `ds4-gguf quantize --prune` (experts dropped from the file) from an expert profile\n"
               "  (`ds4 --expert-profile-out`): per learned-routing layer, the experts with the largest routing-weight\n"
               "  mass are kept (--keep-fraction of them, or those holding at least --min-share of the layer's mass),\n"
               "  never fewer than the experts each token uses. Hash-routed layers keep every expert. --random SEED\n"
               "  keeps the same number per layer chosen at random (the baseline to compare against).\n");
  return 2;
}

int cmd_prune(int argc, char** argv) {
  std::string profile, out;
  double keep = 0, share = 0;
  long long seed = -1;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    try {
      if (a == "--profile") {
        const char* v = next();
        if (!v) return usage();
        profile = v;
      } else if (a == "--out") {
        const char* v = next();
        if (!v) return usage();
        out = v;
      } else if (a == "--keep-fraction") {
        const char* v = next();
        if (!v) return usage();
        keep = std::stod(v);
      } else if (a == "--min-share") {
        const char* v = next();
        if (!v) return usage();
        share = std::stod(v);
      } else if (a == "--random") {
        const char* v = next();
        if (!v) return usage();
        seed = std::stoll(v);
      } else if (a == "-h" || a == "--help") {
        return usage();
      } else {
        std::fprintf(stderr, "prune: unknown argument '%s'\n", a.c_str());
        return usage();
      }
    } catch (const std::exception&) {
      std::fprintf(stderr, "prune: %s needs a number\n", a.c_str());
      return 2;
    }
  }
  if (profile.empty() || out.empty() || (keep > 0) == (share > 0)) {
    if (keep > 0 && share > 0) std::fprintf(stderr, "prune: give --keep-fraction or --min-share, not both\n");
    return usage();
  }
  if (seed >= 0 && keep <= 0) {
    std::fprintf(stderr, "prune: --random needs --keep-fraction\n");
    return 2;
  }
  try {
    const auto p = ds4::quantize::read_profile(profile);
    const auto m = seed >= 0 ? ds4::quantize::random_mask(p.model, keep, static_cast<uint64_t>(seed))
                             : ds4::quantize::make_mask(p, keep > 0 ? keep : 1.0, share);
    ds4::quantize::write_mask(out, m);
    std::printf("wrote %s: %lld of %lld experts pruned (%s; hash-routed layers kept whole)\n", out.c_str(),
                static_cast<long long>(m.pruned_count()), static_cast<long long>(p.model.n_layer * p.model.n_expert),
                m.method.c_str());
    return 0;
  } catch (const ds4::Error& e) {
    std::fprintf(stderr, "prune: %s\n", e.what());
    return 1;
  }
}

const bool registered = ds4::tools::register_command(
    {"prune", "--profile F (--keep-fraction F | --min-share S) --out MASK   prune mask from an expert profile", cmd_prune});

}  // namespace
