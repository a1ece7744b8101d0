#!/usr/bin/env bash
# Runs tests/e2e/openai_client.mjs (the official `openai` npm package) and `dsinfer bench-serve`
# against `dsinfer serve` on a fresh tiny model. Usage: tests/e2e/openai_client.sh path/to/dsinfer [RANKS]
# With RANKS > 1 the server runs under `mpirun -np RANKS` on a tiny model made for that many ranks.
set -euo pipefail
dsinfer="$(realpath "$1")"
ranks="${2:-1}"
launch=()
[ "$ranks" -gt 1 ] && launch=(mpirun -np "$ranks" --oversubscribe)
here="$(cd "$(dirname "$0")" && pwd)"
. "$here/wait_for_port.sh"
work="$(mktemp -d)"
server_pid=""
cleanup() {
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
"$dsinfer" make-tiny --out "$work/model" --seed 11 --tensor-parallel "$ranks" >/dev/null
(cd "$work" && npm install --silent --no-audit --no-fund --no-save openai@4 >/dev/null)
cp "$here/openai_client.mjs" "$work/"
# a warm-up request first (on every rank)
"${launch[@]}" "$dsinfer" serve --model "$work/model" --port 0 --api-key test-key --threads 2 --warmup-tokens 40 \
  2>"$work/server.log" &
server_pid=$!
port="$(wait_for_port "$work/server.log")"
[ -n "$port" ] || { cat "$work/server.log"; echo "openai_client: the server did not start"; exit 1; }
grep -q "warmed up with a 40-token prompt" "$work/server.log" || { cat "$work/server.log"; exit 1; }
node "$work/openai_client.mjs" "http://127.0.0.1:$port/v1" test-key
# and the load generator against the same server
"$dsinfer" bench-serve --port "$port" --api-key test-key --input-len 8 --output-len 4 --num-prompts 4 \
  --concurrency 2 | tee "$work/bench.txt"
grep -q "requests: 4 ok of 4" "$work/bench.txt"
# bench-serve keeps a connection a client: at the server's per-client cap (64 by default) every
# request is served (a connection a request races the server's count of the closed ones)
"$dsinfer" bench-serve --port "$port" --api-key test-key --input-len 8 --output-len 2 --num-prompts 192 \
  --concurrency 64 >"$work/bench64.txt"
grep -q "requests: 192 ok of 192" "$work/bench64.txt" || { cat "$work/bench64.txt"; exit 1; }
# and says why requests failed, with a failing exit status
if "$dsinfer" bench-serve --port "$port" --api-key wrong-key --input-len 8 --output-len 2 --num-prompts 2 \
  --concurrency 2 >"$work/refused.txt" 2>&1; then
  cat "$work/refused.txt"
  echo "bench-serve: refused requests counted as a success"
  exit 1
fi
grep -q "failed: 2 requests: HTTP 401: invalid or missing API key" "$work/refused.txt" || { cat "$work/refused.txt"; exit 1; }
# at a request rate (Poisson arrivals), and a rate that is no rate refused by name
"$dsinfer" bench-serve --port "$port" --api-key test-key --input-len 8 --output-len 2 --num-prompts 6 \
  --concurrency 2 --request-rate 40 >"$work/rate.txt"
grep -q "requests: 6 ok of 6, concurrency 2, 40 a second" "$work/rate.txt" || { cat "$work/rate.txt"; exit 1; }
if "$dsinfer" bench-serve --port "$port" --request-rate 0 2>"$work/rate0.txt"; then exit 1; fi
grep -q -- "--request-rate: 0 is not a positive number" "$work/rate0.txt" || { cat "$work/rate0.txt"; exit 1; }
