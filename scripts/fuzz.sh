#!/usr/bin/env bash
# Builds the safetensors header fuzzer with clang + libFuzzer (+ASan/UBSan) and runs it for a
# bounded time: scripts/fuzz.sh [SECONDS]. Crashing inputs land in build-fuzz/crashes/.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-300}"
CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DDSINFER_BUILD_FUZZ=ON -DDSINFER_CUDA=OFF -DDSINFER_BUILD_TESTS=OFF -DDSINFER_BUILD_BENCH=OFF >/dev/null
cmake --build build-fuzz --target safetensors_fuzz
mkdir -p build-fuzz/corpus build-fuzz/crashes
cp -n tools/fuzz/corpus/safetensors/* build-fuzz/corpus/ 2>/dev/null || true
build-fuzz/tools/fuzz/safetensors_fuzz build-fuzz/corpus -max_total_time="$seconds" -max_len=4096 \
  -artifact_prefix=build-fuzz/crashes/ -print_final_stats=1
