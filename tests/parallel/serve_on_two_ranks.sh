#!/usr/bin/env bash
# `mpirun -np 2 dsinfer serve` on a tiny model made for 2 ranks: rank 0 serves and schedules, rank 1
# follows each step. Concurrent streamed requests all complete; then rank 1 is killed while
# requests run, and the job must end (mpirun exits non-zero, naming the rank) and the clients
# return, within a minute: no hang. Last, a new job whose rank 1 is stopped (SIGSTOP: alive, not
# answering) mid-request: rank 0's collective gives up after --collective-timeout, and the job ends
# with rank 0's error naming it.
#   serve_on_two_ranks.sh DSINFER MPIEXEC
set -euo pipefail
dsinfer=$1 mpiexec=$2
. "$(dirname "$0")/../e2e/wait_for_port.sh"
work=$(mktemp -d)
job=""
cleanup() {
  [ -n "$job" ] && { pkill -9 -P "$job"; kill -9 "$job"; } 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
"$dsinfer" make-tiny --out "$work/model" --seed 11 --tensor-parallel 2 >/dev/null
# start_job [FLAGS]: the server on 2 ranks, its log in $work/server.log; sets job and port.
start_job() {
  "$mpiexec" -np 2 --oversubscribe "$dsinfer" serve --model "$work/model" --port 0 --threads 1 "$@" \
    2>"$work/server.log" &
  job=$!
  port="$(wait_for_port "$work/server.log")"
  [ -n "$port" ] || { cat "$work/server.log"; echo "the server on 2 ranks did not start"; exit 1; }
}
# rank_one: the pid of the job's rank 1 (its environment says so).
rank_one() {
  for p in $(pgrep -P "$job"); do
    grep -qz '^OMPI_COMM_WORLD_RANK=1$' "/proc/$p/environ" && echo "$p"
  done
}
# ends_within SECONDS PID: whether PID is gone within SECONDS.
ends_within() {
  for _ in $(seq 1 $(($1 * 10))); do
    kill -0 "$2" 2>/dev/null || return 0
    sleep 0.1
  done
  return 1
}
# disturb_rank_one SIGNAL SECONDS PROMPTS NAME: long requests from PROMPTS clients (their report in
# $work/NAME.txt), SIGNAL to rank 1 SECONDS in; then the job must end within a minute with a
# non-zero exit ($status) and the clients return within 30 s.
disturb_rank_one() {
  local rank1
  rank1=$(rank_one)
  [ -n "$rank1" ] || { echo "rank 1's process not found among mpirun's children"; exit 1; }
  "$dsinfer" bench-serve --port "$port" --input-len 64 --output-len 2000 --num-prompts "$3" --concurrency "$3" \
    >"$work/$4.txt" 2>&1 &
  local clients=$!
  sleep "$2"
  kill "$1" "$rank1"
  ends_within 60 "$job" || { cat "$work/server.log"; echo "the job still runs a minute after rank 1 got $1"; exit 1; }
  status=0
  wait "$job" || status=$?
  job=""
  [ "$status" != 0 ] || { cat "$work/server.log"; echo "mpirun exited 0 after rank 1 got $1"; exit 1; }
  ends_within 30 "$clients" || { echo "the clients still wait after the job ended"; exit 1; }
}
start_job

"$dsinfer" bench-serve --port "$port" --input-len 32 --output-len 16 --num-prompts 8 --concurrency 4 >"$work/bench.txt"
grep -q "requests: 8 ok of 8" "$work/bench.txt" || { cat "$work/bench.txt" "$work/server.log"; exit 1; }

disturb_rank_one -9 2 4 killed
grep -q "rank 1" "$work/server.log" || { cat "$work/server.log"; echo "no error names rank 1"; exit 1; }
if grep -q "requests: 4 ok of 4" "$work/killed.txt"; then
  echo "every request completed although rank 1 was killed 2 s in: the kill came too late to test anything"
  exit 1
fi
killed="$(grep -o -E "requests: .*|no request .* succeeded" "$work/killed.txt" || echo "no report")"

start_job --collective-timeout 3
disturb_rank_one -STOP 1 2 stopped
grep -q "rank 0 of 2: the other ranks did not join within 3000 ms" "$work/server.log" ||
  { cat "$work/server.log"; echo "rank 0 did not report the collective it gave up on"; exit 1; }
echo "serve on 2 ranks: 8 of 8 requests; rank 1 killed mid-request: the job ended, the clients: $killed;" \
  "rank 1 stopped mid-request: rank 0 gave up after 3 s and the job ended (exit $status):"
grep "dsinfer: error" "$work/server.log"
