// ds4-gguf pack-experts MODEL.gguf [--out FILE] [--keep-gguf-experts] [--restore]
#include <cstdio>
#include <string>

#include "command.h"
#include "core/error.h"
#include "stream/pack.h"
#include "stream/packed_format.h"

namespace {

int usage() {
  std::fprintf(stderr,
               "usage: ds4-gguf pack-experts MODEL.gguf [--out FILE] [--keep-gguf-experts] [--restore]\n"
               "  copies every routed expert into a packed expert file (default MODEL.gguf.experts, where the\n"
               "  engine looks for it), verifies every byte, then frees the expert ranges inside the GGUF\n"
               "  (hole punching) unless --keep-gguf-experts. --restore writes the experts back into the GGUF\n"
               "  and checks that the file is byte-identical to the original (XXH64 recorded at pack time).\n");
  return 2;
}

double gib(uint64_t b) { return static_cast<double>(b) / 1073741824.0; }

int cmd_pack_experts(int argc, char** argv) {
  std::string model, out;
  bool keep = false, restore = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--out") {
      if (i + 1 >= argc) return usage();
      out = argv[++i];
    } else if (a == "--keep-gguf-experts") keep = true;
    else if (a == "--restore") restore = true;
    else if (a == "-h" || a == "--help") return usage();
    else if (!a.empty() && a[0] == '-') {
      std::fprintf(stderr, "pack-experts: unknown argument '%s'\n", a.c_str());
      return usage();
    } else if (model.empty()) model = a;
    else return usage();
  }
  if (model.empty()) return usage();
  if (out.empty()) out = ds4::stream::default_packed_path(model);
  if (restore && keep) {
    std::fprintf(stderr, "pack-experts: --restore and --keep-gguf-experts exclude each other\n");
    return 2;
  }
  try {
    if (restore) {
      auto r = ds4::stream::restore_experts(model, out);
      std::printf("restored %llu experts (%.3f GiB) into %s; whole file XXH64 matches the original. "
                  "Allocated on disk: %.3f -> %.3f GiB. %s was kept.\n",
                  static_cast<unsigned long long>(r.experts), gib(r.payload_bytes), model.c_str(),
                  gib(r.gguf_blocks_before), gib(r.gguf_blocks_after), out.c_str());
    } else {
      auto r = ds4::stream::pack_experts(model, out, keep);
      std::printf("packed %llu experts (%.3f GiB) into %s (%.3f GiB), every record verified\n",
                  static_cast<unsigned long long>(r.experts), gib(r.payload_bytes), out.c_str(),
                  gib(r.packed_file_bytes));
      if (r.freed)
        std::printf("freed the expert ranges in %s: allocated on disk %.3f -> %.3f GiB\n", model.c_str(),
                    gib(r.gguf_blocks_before), gib(r.gguf_blocks_after));
      else
        std::printf("%s kept complete (--keep-gguf-experts)\n", model.c_str());
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pack-experts: %s\n", e.what());
    return 1;
  }
}

const bool registered = ds4::tools::register_command(
    {"pack-experts", "MODEL.gguf [--out FILE] [--keep-gguf-experts] [--restore]   packed expert file for streaming",
     cmd_pack_experts});

}  // namespace
