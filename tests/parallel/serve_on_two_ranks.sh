#!/usr/bin/env bash
# `mpirun -np 2 dsinfer serve` on a tiny model made for 2 ranks: rank 0 serves and schedules, rank 1
# follows each step. Concurrent streamed requests all complete; then rank 1 is killed while
# requests run, and the job must end (mpirun exits non-zero, naming the rank) and the clients
# return, within a minute: no hang.
#   serve_on_two_ranks.sh DSINFER MPIEXEC
set -euo pipefail
dsinfer=$1 mpiexec=$2
work=$(mktemp -d)
job=""
cleanup() {
  [ -n "$job" ] && kill -9 "$job" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
"$dsinfer" make-tiny --out "$work/model" --seed 11 --tensor-parallel 2 >/dev/null
"$mpiexec" -np 2 --oversubscribe "$dsinfer" serve --model "$work/model" --port 0 --threads 1 2>"$work/server.log" &
job=$!
port=""
for _ in $(seq 1 300); do
  port="$(sed -n 's|.*on http://127.0.0.1:\([0-9]*\).*|\1|p' "$work/server.log")"
  [ -n "$port" ] && break
  sleep 0.1
done
[ -n "$port" ] || { cat "$work/server.log"; echo "the server on 2 ranks did not start"; exit 1; }

"$dsinfer" bench-serve --port "$port" --input-len 32 --output-len 16 --num-prompts 8 --concurrency 4 >"$work/bench.txt"
grep -q "requests: 8 ok of 8" "$work/bench.txt" || { cat "$work/bench.txt" "$work/server.log"; exit 1; }

# Rank 1 is the job's process whose environment says so.
rank1=""
for p in $(pgrep -P "$job"); do
  grep -qz '^OMPI_COMM_WORLD_RANK=1$' "/proc/$p/environ" && rank1=$p
done
[ -n "$rank1" ] || { echo "rank 1's process not found among mpirun's children"; exit 1; }
"$dsinfer" bench-serve --port "$port" --input-len 64 --output-len 2000 --num-prompts 4 --concurrency 4 \
  >"$work/killed.txt" 2>&1 &
clients=$!
sleep 2
kill -9 "$rank1"
for _ in $(seq 1 600); do
  kill -0 "$job" 2>/dev/null || break
  sleep 0.1
done
if kill -0 "$job" 2>/dev/null; then
  cat "$work/server.log"
  echo "the job still runs a minute after rank 1 was killed"
  exit 1
fi
status=0
wait "$job" || status=$?
job=""
[ "$status" != 0 ] || { cat "$work/server.log"; echo "mpirun exited 0 after rank 1 was killed"; exit 1; }
grep -q "rank 1" "$work/server.log" || { cat "$work/server.log"; echo "no error names rank 1"; exit 1; }
for _ in $(seq 1 300); do
  kill -0 "$clients" 2>/dev/null || break
  sleep 0.1
done
kill -0 "$clients" 2>/dev/null && { echo "the clients still wait after the job ended"; exit 1; }
if grep -q "requests: 4 ok of 4" "$work/killed.txt"; then
  echo "every request completed although rank 1 was killed 2 s in: the kill came too late to test anything"
  exit 1
fi
echo "serve on 2 ranks: 8 of 8 requests; rank 1 killed mid-request: the job ended with exit $status; the clients: $(grep -o "requests: .*" "$work/killed.txt" || echo none)"
tail -n 8 "$work/server.log"; cat "$work/killed.txt"
