#!/usr/bin/env bash
# The README's first command: install dependencies, build, and run the main job on the built-in
# tiny model (created once in the cache folder): `dsinfer inspect` of the checkpoint, then a short
# two-turn chat. The weights are random, so the text is gibberish; the pipeline (tokenizer, chat
# encoding, every layer of the model, sampling, reasoning/answer split) is the real one.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
model="${XDG_CACHE_HOME:-$HOME/.cache}/dsinfer/tiny-v41"
if [ ! -f "$model/config.json" ]; then build/src/cli/dsinfer make-tiny --out "$model"; fi
build/src/cli/dsinfer inspect --model "$model"
echo
echo "== dsinfer chat on the tiny model: its weights are RANDOM, so expect gibberish =="
printf '%s\n' "Hello! How are you today?" "What can you do?" |
  build/src/cli/dsinfer chat --model "$model" --max-tokens 32 --seed 1
