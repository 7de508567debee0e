// ds4-gguf quantize IN.gguf OUT.gguf --recipe NAME|FILE [--imatrix FILE] [--reuse OLD.gguf] [--prune MASK]
//                   [-t N] [--quiet]
// ds4-gguf quantize --recipe NAME|FILE --print        (the recipe's text)
// ds4-gguf quantize IN.gguf --recipe NAME|FILE --plan  (the type each tensor would get)
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "command.h"
#include "core/error.h"
#include "quant/types.h"
#include "quantize/expert_profile.h"
#include "quantize/quantize.h"

namespace {

int usage() {
  std::fprintf(stderr,
               "usage: ds4-gguf quantize IN.gguf OUT.gguf --recipe NAME|FILE [--imatrix FILE] [--reuse OLD.gguf]\n"
               "                         [--prune MASK] [--uniform-weights] [-t N] [--quiet]\n"
               "       ds4-gguf quantize --recipe NAME|FILE --print     print the recipe (built-ins: flash-q2, flash-q4, q8_0, keep)\n"
               "       ds4-gguf quantize IN.gguf --recipe NAME|FILE --plan  print each tensor's type under it\n"
               "  Re-quantizes IN (F32/F16/BF16/Q8_0/... tensors) into OUT under the recipe: lines 'PATTERN TYPE\n"
               "  [layers=0-2,first:N,last:N]', the last matching line wins, 'keep' copies. --imatrix: llama.cpp\n"
               "  GGUF imatrix (per expert for routed experts). --reuse: copy tensors whose source, type and\n"
               "  imatrix slice are unchanged from OLD (written by this command) instead of recomputing them.\n"
               "  --uniform-weights: a tensor without imatrix weights is quantized with all-ones weights (ggml's\n"
               "  weighted search) instead of ggml's reference rounding (llama-quantize without an imatrix).\n"
               "  --prune: drop the mask's pruned experts (ds4-gguf prune) from OUT; the engine runs OUT as it\n"
               "  runs IN with --prune-mask MASK (hash-routed layers are never pruned). '--recipe keep' prunes\n"
               "  without re-quantizing.\n"
               "  OUT is written to OUT.tmp and renamed when complete.\n");
  return 2;
}

int cmd_quantize(int argc, char** argv) {
  std::string in, out, recipe, imatrix, reuse, prune;
  int threads = 0;
  bool print = false, plan = false, quiet = false, uniform = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](std::string& dst) {
      if (i + 1 >= argc) return false;
      dst = argv[++i];
      return true;
    };
    if (a == "--recipe") {
      if (!value(recipe)) return usage();
    } else if (a == "--imatrix") {
      if (!value(imatrix)) return usage();
    } else if (a == "--reuse") {
      if (!value(reuse)) return usage();
    } else if (a == "--prune") {
      if (!value(prune)) return usage();
    } else if (a == "-t" || a == "--threads") {
      std::string v;
      if (!value(v)) return usage();
      try {
        threads = std::stoi(v);
      } catch (...) {
        std::fprintf(stderr, "quantize: -t needs a number, got '%s'\n", v.c_str());
        return 2;
      }
    } else if (a == "--uniform-weights") uniform = true;
    else if (a == "--print") print = true;
    else if (a == "--plan") plan = true;
    else if (a == "--quiet") quiet = true;
    else if (a == "-h" || a == "--help") return usage();
    else if (!a.empty() && a[0] == '-') {
      std::fprintf(stderr, "quantize: unknown argument '%s'\n", a.c_str());
      return usage();
    } else if (in.empty()) in = a;
    else if (out.empty()) out = a;
    else return usage();
  }
  if (recipe.empty()) return usage();
  try {
    if (print) {
      if (auto t = ds4::quantize::builtin_recipe_text(recipe)) {
        std::fputs(t->c_str(), stdout);
      } else {
        const auto r = ds4::quantize::load_recipe(recipe);  // validates the file
        for (const auto& rule : r.rules)
          std::printf("%s %s%s\n", rule.pattern.c_str(),
                      rule.type ? std::string(ds4::traits(*rule.type).name).c_str() : "keep",
                      rule.layers.empty() ? "" : " (layer-restricted)");
      }
      return 0;
    }
    if (in.empty()) return usage();
    const auto r = ds4::quantize::load_recipe(recipe);
    if (plan) {
      std::vector<std::string> notes;
      for (const auto& p : ds4::quantize::plan_quantize(in, r, &notes))
        std::printf("%-40s %-8s -> %-8s %s\n", p.name.c_str(), std::string(ds4::traits(p.from).name).c_str(),
                    std::string(ds4::traits(p.to).name).c_str(), p.note.c_str());
      for (const auto& n : notes) std::fprintf(stderr, "note: %s\n", n.c_str());
      return 0;
    }
    if (out.empty()) return usage();
    ds4::quantize::QuantizeOptions o;
    o.recipe = r;
    o.threads = threads;
    o.reuse_path = reuse;
    o.uniform_weights = uniform;
    if (!prune.empty()) {
      o.prune = ds4::quantize::read_mask(prune);
      o.prune_path = prune;
    }
    if (!imatrix.empty()) {
      o.imatrix = ds4::quantize::read_imatrix(imatrix);
      o.imatrix_path = imatrix;
    }
    const bool tty = ::isatty(2);
    if (!quiet)
      o.progress = [tty](size_t i, size_t n, const std::string& name, const std::string& what, uint64_t bytes, double s) {
        const double gbs = s > 0 ? static_cast<double>(bytes) / 1e9 / s : 0.0;
        std::fprintf(stderr, "%s[%4zu/%zu] %-40s %-28s %8.1f MB out, %.2f GB/s%s", tty ? "\r\033[K" : "", i, n,
                     name.c_str(), what.c_str(), static_cast<double>(bytes) / 1e6, gbs, tty && i < n ? "" : "\n");
      };
    const auto rep = ds4::quantize::quantize_file(in, out, o);
    for (const auto& n : rep.notes) std::fprintf(stderr, "note: %s\n", n.c_str());
    std::printf("wrote %s: %zu tensors (%zu quantized, %zu with imatrix weights, %zu copied, %zu reused from %s), "
                "%.1f MB -> %.1f MB in %.2f s\n",
                out.c_str(), rep.tensors, rep.quantized, rep.with_imatrix, rep.copied, rep.reused,
                reuse.empty() ? "-" : reuse.c_str(), static_cast<double>(rep.in_bytes) / 1e6,
                static_cast<double>(rep.out_bytes) / 1e6, rep.seconds);
    if (o.prune) {
      std::error_code ec;
      const auto in_size = std::filesystem::file_size(in, ec), out_size = std::filesystem::file_size(out, ec);
      std::printf("pruned %lld routed experts (mask %s): %.2f MB less than the same recipe without --prune "
                  "(%.1f%%); file %.2f MB -> %.2f MB\n",
                  static_cast<long long>(rep.pruned_experts), prune.c_str(), static_cast<double>(rep.pruned_bytes) / 1e6,
                  100.0 * static_cast<double>(rep.pruned_bytes) / static_cast<double>(rep.out_bytes + rep.pruned_bytes),
                  static_cast<double>(in_size) / 1e6, static_cast<double>(out_size) / 1e6);
    }
    return 0;
  } catch (const ds4::Error& e) {
    std::fprintf(stderr, "quantize: %s\n", e.what());
    return 1;
  }
}

const bool registered = ds4::tools::register_command(
    {"quantize", "IN OUT --recipe NAME|FILE [--imatrix F] [--reuse OLD]   re-quantize under a recipe", cmd_quantize});

}  // namespace
