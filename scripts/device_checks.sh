#!/usr/bin/env bash
# Runs on the device machine (an H200) over a build made here by scripts/gpu_tests.sh; carry
# build-cuda/device-pack.tar.xz (scripts/device_pack.sh: the binaries below, stripped and
# compressed, unpacked here first), or build-cuda/tests/ops_test, build-cuda/tests/cuda_test,
# build-cuda/tests/golden_cuda_test, build-cuda/bench/cuda_decode_bench, build-cuda/src/cli/dsinfer
# and build-cuda/devlib (the kernel steps, kernels kab sass kprofile: build-cuda/bench/cuda_linear_bench,
# and for ab and kab the _base builds). Writes logs under $OUT (or /tmp/dsinfer-device).
# Steps: the GPU tests (per-op and the golden fixtures), the CLI and server on the GPU with the tiny
# model (CPU-vs-GPU text and logits, bench-serve at three concurrencies), the decode benchmark.
#   scripts/device_checks.sh [tests] [serve] [decode] [kernels] [flash] [underload] [firsttoken] [ab] [kab] [sass] [timeline] [profile] [breakdown] [kprofile] [experts] [esass] [eprofile] [pfwindow]
#   (default: the first three)
# GOLDEN_KERNELS (default "auto"; or fma, gemv, mma) picks the GEMM kernels the goldens run with; DECODE_ARGS
# replaces the decode benchmark's arguments.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-/tmp/dsinfer-device}"
mkdir -p "$out"
# The image's own libraries first: its Open MPI (which dsinfer links) needs its newer libstdc++.
export LD_LIBRARY_PATH="/usr/lib/x86_64-linux-gnu:$PWD/build-cuda/devlib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export DSINFER_TEST_DATA="$PWD/tests/data"
steps="${*:-tests serve decode}"
has() { [[ " $steps " == *" $1 "* ]]; }  # a step named on the command line (whole words)
# The SASS of the kernels of binary $1 whose names match the regex $2 (a binary's whole SASS is
# megabytes).
sass_of() {
  /usr/local/cuda/bin/cuobjdump -sass "$1" 2>&1 | awk -v re="$2" '/Function :/ {on = $0 ~ re} on'
}
# kernels: the kernel lab's check against the CPU, then the per-kernel benchmark (KERNEL_ARGS
# replaces its arguments).
# flash: the 40-layer Flash-shaped model (54 GiB, 64 experts), decode at 4K/32K and prefill;
# FLASH_ARGS replaces its arguments. profile: ncu's warp-state and memory sections for the kernels
# named by PROFILE_KERNELS (a regex; default the attention, the block-scaled and dense GEMVs) over
# one batch-1 decode step of the Flash-shaped model. breakdown: every kernel's time in one such
# step (ncu, one metric; BREAKDOWN_BATCH sequences, default 1; NCU_ARGS as for pfwindow), summed by
# kernel name. kprofile: ncu on one shape of the kernel benchmark.
# pfwindow: the same for a window of a timed 4K prefill chunk (kernels PF_SKIP .. PF_SKIP +
# PF_COUNT of it, default 10000 and 1000: about two layers in the middle; ncu sees only the timed
# prompt, which the benchmark brackets with cudaProfilerStart/Stop; a whole chunk under ncu takes
# minutes of device time; NCU_ARGS adds ncu options, e.g. "--cache-control none" to keep the caches
# warm between kernels as a real run does).
[ -f build-cuda/device-pack.tar.xz ] &&
  python3 -c "import tarfile; tarfile.open('build-cuda/device-pack.tar.xz').extractall('build-cuda')"
dsinfer=build-cuda/src/cli/dsinfer
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/device.txt"

if has tests; then
  # Whole logs under $OUT; printed: the summary and each failure with its message.
  for t in ops_test cuda_test; do
    build-cuda/tests/$t >"$out/$t.log" 2>&1
    grep -E -A8 "Failure$|: Failure" "$out/$t.log" | head -n 60
    grep -E "^\[  (PASSED|FAILED) +\]" "$out/$t.log"
  done
  # The golden fixtures with each block-scaled GEMM kernel (auto: the fastest exact ones; wgmma, which
  # took v41-tiny-b past the tolerance, docs/perf-notes.md, is in the kernel lab: step kernels).
  for k in ${GOLDEN_KERNELS:-auto}; do
    echo "golden on the GPU, linear kernel $k:"
    DSINFER_CUDA_LINEAR=$k build-cuda/tests/golden_cuda_test >"$out/golden_cuda_$k.log" 2>&1
    grep -E -A8 "Failure$|: Failure" "$out/golden_cuda_$k.log" | head -n 60
    grep -E "replayed|by layer|FAILED  \]|PASSED" "$out/golden_cuda_$k.log" | head -n 20
  done
fi

if has serve; then
  tiny=/tmp/dsinfer-tiny
  $dsinfer make-tiny --out $tiny >/dev/null
  $dsinfer generate --device cuda --model $tiny --prompt "The quick brown fox" --max-tokens 24 --temperature 0 \
    >"$out/generate_cuda.txt" 2>&1
  $dsinfer generate --device cpu --model $tiny --prompt "The quick brown fox" --max-tokens 24 --temperature 0 \
    >"$out/generate_cpu.txt" 2>&1
  # The same with the decode steps recorded as graphs and relaunched (the step recorder).
  DSINFER_CUDA_GRAPH=1 $dsinfer generate --device cuda --model $tiny --prompt "The quick brown fox" --max-tokens 24 \
    --temperature 0 >"$out/generate_cuda_graphs.txt" 2>&1
  echo "generate: cuda and cpu outputs $(cmp -s <(head -n 1 "$out/generate_cuda.txt") <(head -n 1 "$out/generate_cpu.txt") && echo equal || echo DIFFER)"
  echo "generate: cuda with graphs and cpu outputs $(cmp -s <(head -n 1 "$out/generate_cuda_graphs.txt") <(head -n 1 "$out/generate_cpu.txt") && echo equal || echo DIFFER)"
  cat "$out/generate_cpu.txt" "$out/generate_cuda.txt" "$out/generate_cuda_graphs.txt"
  # Logits of the tiny model on both backends (prefill + 8 decode steps, teacher-forced alike).
  echo '{"prompts": [[1, 400, 401, 402, 403, 404, 405, 406], [1, 600, 17, 33]]}' >/tmp/prompts.json
  for d in cpu cuda; do
    $dsinfer logits --device $d --model $tiny --prompts /tmp/prompts.json --steps 8 --out /tmp/logits_$d.safetensors
  done
  python3 - <<'PY'
import json, struct
def read(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    e = h["logits"]
    s, t = e["data_offsets"]
    return e["shape"], struct.unpack("<%df" % ((t - s) // 4), b[8 + n + s:8 + n + t])
shape, a = read("/tmp/logits_cpu.safetensors")
_, g = read("/tmp/logits_cuda.safetensors")
v = shape[2]
for r in range(shape[0] * shape[1]):
    x, y = a[r * v:(r + 1) * v], g[r * v:(r + 1) * v]
    top = sorted(range(v), key=lambda i: -x[i])[:2]
    print("forward %2d: max |d logit| %.4f, cpu top-1/2 margin %.4f, argmax %s" % (
        r, max(abs(p - q) for p, q in zip(x, y)), x[top[0]] - x[top[1]],
        "same" if max(range(v), key=lambda i: y[i]) == top[0] else "differs"))
PY
  $dsinfer serve --device cuda --model $tiny --port 8123 >"$out/serve.log" 2>&1 &
  server=$!
  for _ in $(seq 100); do curl -sf localhost:8123/health >/dev/null && break; sleep 0.2; done
  for c in 1 8 32; do
    $dsinfer bench-serve --port 8123 --input-len 64 --output-len 32 --num-prompts 64 --concurrency $c 2>&1 |
      tee "$out/bench_serve_c$c.txt"
  done
  kill $server; wait $server 2>/dev/null
fi

# underload: the Flash-shaped checkpoint (the flash step's, or made here; its big weights load as
# zeros, its random head and padded tokenizer stream text) served on the GPU, and bench-serve with
# ~1K-token prompts and 256 output tokens at concurrency 1, 16 and 64, LOAD_ROUNDS requests a
# client (default 2: the second round meets the first's decodes), sent at once or, with LOAD_RATE,
# at that many requests a second; SERVE_ARGS adds serve options (e.g. "--prefill-with-decodes 2048"),
# LOAD_ARGS bench-serve's (e.g. "--temperature 1 --top-p 0.95": sampled requests, drawn on the GPU),
# LOAD_LEVELS the concurrencies (default "1 16 64").
if has underload; then
  flash=/tmp/dsinfer_flash_bench
  [ -f $flash/config.json ] || build-cuda/bench/cuda_decode_bench --flash 64 --steps 8 --batch 1 --context 4096 >/dev/null
  $dsinfer serve --device cuda --model $flash --speculative off --max-running 64 --port 8124 ${SERVE_ARGS:-} \
    >"$out/flash_serve.log" 2>&1 &
  server=$!
  for _ in $(seq 600); do curl -sf localhost:8124/health >/dev/null && break; sleep 0.5; done
  for c in ${LOAD_LEVELS:-1 16 64}; do
    $dsinfer bench-serve --port 8124 --input-len 340 --output-len 256 --num-prompts $((c * ${LOAD_ROUNDS:-2})) \
      --concurrency $c ${LOAD_RATE:+--request-rate $LOAD_RATE} ${LOAD_ARGS:-} 2>&1 | tee "$out/flash_bench_serve_c$c.txt"
  done
  kill $server; wait $server 2>/dev/null
fi

# firsttoken: TTFT at concurrency 1 of a server's first request and of the four after it (~1K-token
# prompts, 16 output tokens, the Flash-shaped checkpoint), without the warm-up request
# (--warmup-tokens 0) and with the default one; and how long each server took to answer /health.
if has firsttoken; then
  flash=/tmp/dsinfer_flash_bench
  [ -f $flash/config.json ] || build-cuda/bench/cuda_decode_bench --flash 64 --steps 8 --batch 1 --context 4096 >/dev/null
  for warmup in "--warmup-tokens 0" ""; do
    echo "serve ${warmup:-with the default warm-up}:"
    start=$(date +%s.%N)
    $dsinfer serve --device cuda --model $flash --speculative off --port 8125 $warmup >"$out/firsttoken_serve.log" 2>&1 &
    server=$!
    for _ in $(seq 1200); do curl -sf localhost:8125/health >/dev/null && break; sleep 0.25; done
    awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "  healthy after %.1f s\n", b - a }'
    grep "warmed up" "$out/firsttoken_serve.log"
    for n in 1 4; do
      $dsinfer bench-serve --port 8125 --input-len 340 --output-len 16 --num-prompts $n --concurrency 1 2>&1 |
        grep -E "^TTFT" | sed "s/^/  $n request(s): /"
    done
    kill $server; wait $server 2>/dev/null
  done
fi

if has decode; then
  build-cuda/bench/cuda_decode_bench ${DECODE_ARGS:---layers 24 --steps 8 --batch 1,8,32,64 --context 128,4096,32768} 2>&1 |
    tee "$out/cuda_decode_bench.txt"
fi

if has kernels; then
  build-cuda/bench/cuda_linear_bench check >"$out/cuda_lab_check.txt" 2>&1
  grep -E "FAILED|lab check" "$out/cuda_lab_check.txt"
  build-cuda/bench/cuda_linear_bench ${KERNEL_ARGS:---batches 1,8} 2>&1 | tee "$out/cuda_kernel_bench.txt"
fi

if has flash; then
  build-cuda/bench/cuda_decode_bench ${FLASH_ARGS:---flash 64 --steps 6 --batch 1,8,32,64 --context 4096,32768 --prefill 4096} 2>&1 |
    tee "$out/cuda_flash_bench.txt"
fi

# ab: the same benchmark from this build and from build-cuda/bench/cuda_decode_bench_base (a build of
# another commit, carried too), alternated AB_ROUNDS times (default 2) on the same card:
# AB_ARGS (default: a 4K prefill, then decode at batch 1 and 64 at 4K).
if has ab; then
  for r in $(seq "${AB_ROUNDS:-2}"); do
    for b in cuda_decode_bench cuda_decode_bench_base; do
      echo "== $b, round $r"
      build-cuda/bench/$b ${AB_ARGS:---flash 64 --steps 6 --batch 1,64 --context 4096 --prefill 4096} 2>&1 |
        tee "$out/ab_${b}_$r.txt" | grep -E "^\| 4096 \||^prefill|invalid|error"
    done
  done
fi

# kab: the kernel benchmark (no checkpoint to write or load: seconds, not minutes) from this build and
# from build-cuda/bench/cuda_linear_bench_base (another commit's, carried too), alternated AB_ROUNDS
# times; KAB_ONLY (default "experts") picks the shapes by name, KAB_BATCHES (default 1,8,64) the rows.
if has kab; then
  for r in $(seq "${AB_ROUNDS:-2}"); do
    for b in cuda_linear_bench cuda_linear_bench_base; do
      echo "== $b, round $r"
      BENCH_QUICK=1 BENCH_ONLY="${KAB_ONLY:-experts}" build-cuda/bench/$b --batches "${KAB_BATCHES:-1,8,64}" 2>&1 |
        tee "$out/kab_${b}_$r.txt" | grep -E "tiled|ceilings"
    done
  done
fi

# sass: the machine code of the kernels whose names match SASS_KERNELS (a regex, default the tiled
# linear's) in the kernel benchmark, into $OUT/kernels.sass (cuobjdump is on the device, not here).
if has sass; then
  sass_of build-cuda/bench/cuda_linear_bench "${SASS_KERNELS:-block_linear_tiled}" >"$out/kernels.sass"
  grep -c "Function :" "$out/kernels.sass"
fi

# timeline: each kernel's exclusive time in launched decode steps of the Flash-shaped model as they
# ran (cuda_decode_bench --timeline: CUPTI's records, which ncu's replays are not), at the batches
# TIMELINE_BATCHES (default 1,64), 4K context; the tables into $OUT/timeline_<binary>.txt. With
# TIMELINE_AB=1 also build-cuda/bench/cuda_decode_bench_base's (another commit's build), after it.
if has timeline; then
  for b in cuda_decode_bench ${TIMELINE_AB:+cuda_decode_bench_base}; do
    echo "== $b"
    build-cuda/bench/$b --flash 64 --steps 4 --batch "${TIMELINE_BATCHES:-1,64}" --context 4096 \
      --timeline "${TIMELINE_BATCHES:-1,64}" 2>&1 | tee "$out/timeline_$b.txt" | grep -E "^\| 4096|^timeline|^batch"
  done
fi

if has profile; then
  /usr/local/cuda/bin/ncu --clock-control none --kernel-name "regex:${PROFILE_KERNELS:-sm90_bf16_sparse_attn|sm90_fp8_block_linear|sm90_f64_dense}" \
    --launch-skip 100 --launch-count 16 --section SpeedOfLight --section WarpStateStats --section MemoryWorkloadAnalysis \
    --section LaunchStats --section Occupancy \
    build-cuda/bench/cuda_decode_bench --flash 64 --steps 1 --batch 1 --context 4096 2>&1 | tee "$out/ncu_profile.txt" |
    grep -E "sm90_|Duration|Throughput|Stall|Warp Cycles|Achieved Occupancy|Registers" | head -n 200
fi

if has kprofile; then
  # ncu on one shape of the kernel benchmark (BENCH_ONLY: part of its name; PROFILE_KERNELS: the
  # kernel regex, default the tiled decode kernel; KPROFILE_ROWS: the activation rows, default 1):
  # issue rate, stalls, instructions, occupancy.
  BENCH_ONLY="${BENCH_ONLY:-6 experts w1+w3}" /usr/local/cuda/bin/ncu --clock-control none \
    --kernel-name "regex:${PROFILE_KERNELS:-block_linear_tiled}" --launch-skip 3 --launch-count 1 --section SpeedOfLight \
    --section WarpStateStats --section SchedulerStats --section InstructionStats --section Occupancy \
    build-cuda/bench/cuda_linear_bench --batches "${KPROFILE_ROWS:-1}" >"$out/ncu_kernel.txt" 2>&1
  grep -E "Duration|Issued Instructions  |Issued Ipc|Warp Cycles Per Issued|Achieved Active|stalled|DRAM Throughput" \
    "$out/ncu_kernel.txt"
fi

if has experts; then
  # A decode step's routed experts alone (bench/cuda/experts_bench.cu: batches 1, 8, 64; EXPERTS_ARGS
  # replaces its arguments), and the same of every other build packed beside it (_base, _v1, ...),
  # the builds taking turns EXPERTS_ROUNDS times (default 1).
  for round in $(seq "${EXPERTS_ROUNDS:-1}"); do
    for path in build-cuda/bench/cuda_experts_bench*; do
      [ -x "$path" ] || continue
      b=$(basename "$path")
      echo "$b (round $round):"
      "$path" ${EXPERTS_ARGS:-} 2>&1 | tee -a "$out/$b.txt"
    done
  done
fi

if has esass; then
  # The experts' kernel instance (sm90_block_linear_wgmma<true, 16>) of each experts benchmark build
  # in SASS, and its instructions counted by opcode: where a change moved the instruction mix.
  for path in build-cuda/bench/cuda_experts_bench*; do
    [ -x "$path" ] || continue
    b=$(basename "$path")
    sass_of "$path" wgmmaILb1ELi16E >"$out/$b.sass" || { echo "cuobjdump failed on $b"; continue; }
    echo "$b:"
    python3 - "$out/$b.sass" <<'PY'
import collections, re, sys
ops = collections.Counter()
for line in open(sys.argv[1]):
    m = re.match(r"\s*/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)", line)
    if m:
        ops[m.group(1)] += 1
total = sum(ops.values())
print(f"  {total} instructions; " + ", ".join(f"{op} {n}" for op, n in ops.most_common(16)))
PY
  done
fi

if has eprofile; then
  # ncu on the routed experts' two launches of one batch (EPROFILE_BATCH, default 64; with --reps 1 the
  # fourth w1 + w3 launch and the first w2, after 3 warm-up runs): issue rate,
  # stalls, memory, occupancy.
  /usr/local/cuda/bin/ncu --clock-control none --print-kernel-base demangled --kernel-name regex:block_linear_wgmma \
    --launch-skip 3 --launch-count 2 --section SpeedOfLight --section WarpStateStats --section SchedulerStats \
    --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats \
    build-cuda/bench/cuda_experts_bench --batches "${EPROFILE_BATCH:-64}" --reps 1 >"$out/ncu_experts.txt" 2>&1
  grep -E "sm90_|Duration|DRAM Throughput|L2 Cache Throughput|Issued Ipc|Warp Cycles Per Issued|Achieved Occupancy|No Eligible|stalled|Registers" \
    "$out/ncu_experts.txt" | head -n 80
fi

if has breakdown; then
  /usr/local/cuda/bin/ncu --clock-control none ${NCU_ARGS:-} --metrics gpu__time_duration.sum --csv --print-units base \
    --print-kernel-base function \
    build-cuda/bench/cuda_decode_bench --flash 64 --steps 1 --batch "${BREAKDOWN_BATCH:-1}" --context "${BREAKDOWN_CONTEXT:-4096}" \
    >"$out/ncu_breakdown.csv" 2>"$out/ncu_breakdown.err"
  python3 - "$out/ncu_breakdown.csv" <<'PY' | tee "$out/breakdown.txt"
import csv, re, sys, collections
rows = [r for r in csv.DictReader(l for l in open(sys.argv[1]) if l.startswith('"'))
        if r.get("Metric Name") == "gpu__time_duration.sum"]
def base(name):  # a function name, with or without its namespaces, template and parameters
    m = re.search(r"(\w+)(?:<[^()]*>)?\(", name)
    return m.group(1) if m else name
names = [base(r["Kernel Name"]) for r in rows]
start = max(i for i, n in enumerate(names) if "embed" in n)  # the last forward (the timed step)
while start > 0 and "embed" in names[start - 1]:  # its embedding is a launch per stream copy
    start -= 1
per = collections.defaultdict(lambda: [0, 0.0])
for n, r in zip(names[start:], rows[start:]):
    per[n][0] += 1
    per[n][1] += float(r["Metric Value"].replace(",", "")) * 1e-3  # ns -> us
total = sum(v[1] for v in per.values())
print(f"one decode step: {len(names) - start} kernels, {total / 1e3:.2f} ms of kernel time (ncu: serialised; caches flushed unless NCU_ARGS keeps them)")
for n, (c, us) in sorted(per.items(), key=lambda kv: -kv[1][1]):
    print(f"{n:40s} {c:6d} calls {us / 1e3:8.3f} ms {us / c:9.1f} us/call {100 * us / total:5.1f} %")
PY
fi

if has pfwindow; then
  /usr/local/cuda/bin/ncu --clock-control none ${NCU_ARGS:-} --profile-from-start off --launch-skip "${PF_SKIP:-10000}" \
    --launch-count "${PF_COUNT:-1000}" --metrics gpu__time_duration.sum --csv --print-units base --print-kernel-base function \
    build-cuda/bench/cuda_decode_bench --flash 64 --steps 1 --batch '' --context 4096 --prefill 4096 \
    >"$out/ncu_prefill.csv" 2>"$out/ncu_prefill.err"
  python3 - "$out/ncu_prefill.csv" <<'PY' | tee "$out/prefill_breakdown.txt"
import csv, re, sys, collections
rows = [r for r in csv.DictReader(l for l in open(sys.argv[1]) if l.startswith('"'))
        if r.get("Metric Name") == "gpu__time_duration.sum"]
per = collections.defaultdict(lambda: [0, 0.0])
for r in rows:
    m = re.search(r"(\w+)(?:<[^()]*>)?\(", r["Kernel Name"])
    name = m.group(1) if m else r["Kernel Name"]
    per[name][0] += 1
    per[name][1] += float(r["Metric Value"].replace(",", "")) * 1e-3  # ns -> us
total = sum(v[1] for v in per.values())
print(f"a window of a 4K prefill chunk: {len(rows)} kernels, {total / 1e3:.2f} ms of kernel time (ncu: serialised; caches flushed unless NCU_ARGS keeps them)")
for n, (c, us) in sorted(per.items(), key=lambda kv: -kv[1][1])[:40]:
    print(f"{n:45s} {c:6d} calls {us / 1e3:8.3f} ms {us / c:9.1f} us/call {100 * us / total:5.1f} %")
PY
fi
