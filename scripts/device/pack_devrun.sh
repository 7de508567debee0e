#!/usr/bin/env bash
# Run HERE after `make cuda`: copies the CUDA build's programs and the shared libraries they
# need beyond the GPU image's own (fmt, pcre2, xxhash, edit, ...) into .devrun/ (git-ignored
# via .git/info/exclude), so a device call can carry prebuilt binaries: nothing is compiled on
# the GPU machine. Usage: scripts/device/pack_devrun.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build-cuda}
grep -qx '/.devrun/' .git/info/exclude 2>/dev/null || echo '/.devrun/' >> "$(git rev-parse --git-common-dir)/info/exclude"
rm -rf .devrun && mkdir -p .devrun/bin .devrun/lib
for b in ds4 ds4-gguf ds4-bench ds4-server test_cuda_parity test_cuda_stream cuda_gemv_check cuda_backend_check cuda_dequant_check cuda_mma_check; do
  [ -x "$build/bin/$b" ] || continue
  cp "$build/bin/$b" .devrun/bin/
  strip --strip-debug .devrun/bin/$b
done
. scripts/device/devrun_libs.sh
devrun_libs .devrun
cp scripts/device/cuda_suite.sh scripts/device/stream_gpu.sh scripts/device/stream_evidence.sh scripts/device/ncu_step.sh scripts/device/ab_decode.sh scripts/device/ncu_kernels.sh scripts/device/toggles.sh scripts/device/cuda_formats.sh scripts/device/prefill_mma.sh scripts/device/prefill_chunk.sh scripts/device/ncu_sass.sh scripts/device/decode_ab.sh scripts/device/decode_bar.sh scripts/device/bf16_rate.py .devrun/
du -sh .devrun; ls .devrun/bin .devrun/lib
