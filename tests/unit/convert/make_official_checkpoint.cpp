// Writes the tiny official-layout DeepSeek V4 checkpoint (official_checkpoint.h: FP8 E4M3
// weights with 128x128 E8M0 block scales, FP4 E2M1 routed experts with per-32 E8M0 scales)
// from the flash_geom fixture, with the release's tensor names and config.json dialect, so
// that other converters (llama.cpp's convert_hf_to_gguf.py, scripts/device/convert_compare.sh)
// can read the same files as ours.
//   ds4_make_official_checkpoint FLASH_GEOM_DIR OUT_DIR [REFERENCE_DIR]
// REFERENCE_DIR (optional) receives the exact f32 decode of the checkpoint.
#include <cstdio>
#include <exception>

#include "official_checkpoint.h"

int main(int argc, char** argv) {
  if (argc < 3 || argc > 4) {
    std::fprintf(stderr, "usage: %s FLASH_GEOM_DIR OUT_DIR [REFERENCE_DIR]\n", argv[0]);
    return 2;
  }
  try {
    ds4::test::make_official_checkpoint(argv[1], argv[2], argc == 4 ? argv[3] : "", /*release_layout=*/true);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", argv[0], e.what());
    return 1;
  }
  std::printf("wrote %s/config.json and %s/model.safetensors\n", argv[2], argv[2]);
  return 0;
}
