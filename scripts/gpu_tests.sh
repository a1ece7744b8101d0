#!/usr/bin/env bash
# Builds the GPU tests here for the device machine (an H200 with Ubuntu 24.04: glibc 2.39, newer
# than this Debian 12 build's 2.36, so binaries built here run there). The device image has no
# fmt, so the shared libraries the binaries need travel in build-cuda/devlib.
#   scripts/gpu_tests.sh            build; then, on the device (carry build-cuda/tests, build-cuda/devlib):
#   LD_LIBRARY_PATH=build-cuda/devlib:/usr/local/cuda/lib64 build-cuda/tests/cuda_test
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=build-cuda scripts/build.sh -DDSINFER_CUDA=ON -DCMAKE_EXE_LINKER_FLAGS="-static-libstdc++ -static-libgcc"
mkdir -p build-cuda/devlib
cp -L /usr/lib/x86_64-linux-gnu/libfmt.so.9 /usr/lib/x86_64-linux-gnu/libstdc++.so.6 \
  /usr/lib/x86_64-linux-gnu/libgcc_s.so.1 build-cuda/devlib/
