#!/usr/bin/env bash
# `mpirun -np 2 dsinfer logits` on a golden fixture (the reference's selections replayed) against
# `dsinfer logits` on one rank: rank 0 writes the file alone, and it equals the single rank's byte
# for byte, as does `dsinfer logits --tensor-parallel 2` (what TensorParallel.OnRanks2 measures of
# these fixtures: the replayed logits come out bit-equal to one rank's; a change that breaks that
# equality is worth a look, though within the bound it would still be correct). Then `chat` under
# mpirun is refused by name.
#   logits_on_two_ranks.sh DSINFER MPIEXEC FIXTURE_DIR
set -euo pipefail
dsinfer=$1 mpiexec=$2 fixture=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
# golden.json holds the prompts (the logits command reads its "prompts") and the forwards.
steps=$(($(grep -o '"steps": *[0-9]*' "$fixture/golden.json" | grep -o '[0-9]*$') - 1))
args=(logits --model "$fixture/checkpoint" --prompts "$fixture/golden.json" --steps "$steps" --threads 1
  --force-tokens "$fixture/golden.safetensors" --replay "$fixture/golden_debug.safetensors")
"$dsinfer" "${args[@]}" --out one.safetensors >/dev/null
"$mpiexec" -np 2 --oversubscribe "$dsinfer" "${args[@]}" --out two.safetensors >out.txt
[[ $(grep -c wrote out.txt) == 1 ]] || { echo "expected one 'wrote' line (rank 0's):"; cat out.txt; exit 1; }
cmp one.safetensors two.safetensors
# The shorthand: `--tensor-parallel 2` outside mpirun starts the same two ranks itself.
"$dsinfer" "${args[@]}" --tensor-parallel 2 --out three.safetensors >out3.txt
[[ $(grep -c wrote out3.txt) == 1 ]] || { echo "expected one 'wrote' line (rank 0's):"; cat out3.txt; exit 1; }
cmp one.safetensors three.safetensors
if "$mpiexec" -np 2 --oversubscribe "$dsinfer" chat --model "$fixture/checkpoint" </dev/null >chat.txt 2>&1; then
  echo "chat under mpirun should be refused"
  exit 1
fi
grep -q 'runs on one rank today' chat.txt
echo "logits on 2 ranks (mpirun, --tensor-parallel 2) equal 1 rank's; chat on 2 ranks refused"
