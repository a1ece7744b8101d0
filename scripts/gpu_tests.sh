#!/usr/bin/env bash
# Builds the GPU tests here for the device machine (an H200 with Ubuntu 24.04: glibc 2.39, newer
# than this Debian 12 build's 2.36, so binaries built here run there). The device image has no
# fmt, so the shared libraries the binaries need travel in build-cuda/devlib.
#   scripts/gpu_tests.sh            build; then, on the device, scripts/device_checks.sh (it says
#   what to carry)
set -euo pipefail
cd "$(dirname "$0")/.."
# sm_90a machine code only (no PTX for other GPUs): smaller binaries for the device transfer.
BUILD_DIR=build-cuda scripts/build.sh -DDSINFER_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a-real \
  -DCMAKE_EXE_LINKER_FLAGS="-static-libstdc++ -static-libgcc"
mkdir -p build-cuda/devlib
# Every shared library the binaries need beyond glibc and the CUDA driver and libraries travels (the CLI links more
# Debian libraries than the tests: PCRE2, utf8proc).
cp -L /usr/lib/x86_64-linux-gnu/libstdc++.so.6 /usr/lib/x86_64-linux-gnu/libgcc_s.so.1 build-cuda/devlib/
ldd build-cuda/src/cli/dsinfer build-cuda/tests/*cuda_test build-cuda/tests/ops_test build-cuda/bench/cuda_*_bench | awk '$3 ~ /^\// {print $3}' | sort -u |
  grep -vE '/(libc|libm|libpthread|libdl|librt|ld-linux[^/]*|libcuda|libcublas|libcublasLt|libnccl)\.so' | xargs -r cp -L -t build-cuda/devlib/
