#!/usr/bin/env bash
# Packs what scripts/device_checks.sh runs into one compressed file for the device machine (whose
# transfer takes 64 MiB in all, the working tree included: the binaries stripped and compressed
# are ~5 MB instead of ~50). Run after scripts/gpu_tests.sh; carry build-cuda/device-pack.tar.xz;
# device_checks.sh unpacks it first. Arguments: more files under build-cuda to pack (e.g. a
# benchmark of another commit, bench/cuda_decode_bench_base).
#   scripts/device_pack.sh [bench/cuda_decode_bench_base ...]
set -euo pipefail
cd "$(dirname "$0")/../build-cuda"
files=(tests/ops_test tests/cuda_test tests/golden_cuda_test src/cli/dsinfer bench/cuda_decode_bench
  bench/cuda_linear_bench bench/cuda_experts_bench "$@")
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
for f in "${files[@]}"; do
  [ -f "$f" ] || { echo "device_pack: no build-cuda/$f (run scripts/gpu_tests.sh first)" >&2; exit 1; }
  mkdir -p "$stage/$(dirname "$f")"
  cp "$f" "$stage/$f"
  strip "$stage/$f"
done
cp -r devlib "$stage/"
tar -C "$stage" -cf - . | xz -6 -T0 >device-pack.tar.xz.part
mv device-pack.tar.xz.part device-pack.tar.xz
echo "build-cuda/device-pack.tar.xz: $(du -h device-pack.tar.xz | cut -f1)"
