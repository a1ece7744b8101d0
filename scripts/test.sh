#!/usr/bin/env bash
# The README's second command: install dependencies, build, and run every test (ctest labels:
# cpu, golden, gpu; gpu tests skip themselves without a GPU) but the `long` ones (past 128K
# positions on the CPU, 20 minutes on 2 cores: `ctest -L long` runs them), then the openai npm client against
# the server. With SANITIZE=1 it also builds a
# second tree under AddressSanitizer + UndefinedBehaviorSanitizer and runs the suite there (without
# the MPI communicator: Open MPI's own allocations would be reported as leaks).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cuda_flag=()
[ -n "${CUDA:-}" ] && cuda_flag=(-DDSINFER_CUDA="$CUDA" -DDSINFER_NCCL="$CUDA")  # CUDA=ON: a missing nvcc or NCCL is an error
scripts/build.sh -DDSINFER_WERROR=ON -DDSINFER_MPI=ON "${cuda_flag[@]}"
(cd build && ctest --output-on-failure -j "$(nproc)" -LE long)
tests/e2e/openai_client.sh build/src/cli/dsinfer  # the official openai npm client against dsinfer serve
# and against the server on 2 ranks under mpirun (root allowed, as in containers)
OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none \
  tests/e2e/openai_client.sh build/src/cli/dsinfer 2
if [ "${SANITIZE:-0}" = 1 ]; then
  # -O1 with line tables: the sanitizer build compiles in ~60 % of the time of -O2 -g (it was half of
  # CI's time on 2 cores), its tests run ~30 % longer; the reports keep their file:line.
  BUILD_DIR=build-asan BUILD_TYPE=RelWithDebInfo scripts/build.sh -DDSINFER_SANITIZE=address,undefined \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" \
    -DDSINFER_CUDA=OFF -DDSINFER_MPI=OFF -DDSINFER_BUILD_BENCH=OFF -DDSINFER_WERROR=ON
  # The exhaustive prefill sweeps (every prompt length in every piece size: about half of this pass's
  # 8 minutes on 2 cores) run in the normal pass only; under the sanitizers the same chunked-prefill
  # code runs in BatchInvariance.BesideAPrefill, the step replay and the engine's tests. So do the
  # speculative engine's two long sweeps (1,000 sampled requests, 52 s under the sanitizers; every
  # greedy request against plain decoding, 68 s): the same drafting and verifying code runs under
  # the sanitizers in the server's speculative test and the engine's smaller ones.
  (cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 ctest --output-on-failure \
    -j "$(nproc)" -LE long \
    -E 'ChunkedPrefill\.EqualsOneShotBitForBit|LongPrefill\.ThousandsOfPositions|Engine\.SpeculativeSamplingFollowsTheModelsLaw|Engine\.SpeculativeGreedyOutputIsPlainDecodings')
fi
