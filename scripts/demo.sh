#!/usr/bin/env bash
# The README's first command: install dependencies, build, and run the main job on the built-in
# tiny model (created once in the cache folder): `dsinfer inspect` of the checkpoint, then a short
# generation. The weights are random, so the text is gibberish; the pipeline is the real one.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
model="${XDG_CACHE_HOME:-$HOME/.cache}/dsinfer/tiny-v41"
if [ ! -f "$model/config.json" ]; then build/src/cli/dsinfer make-tiny --out "$model"; fi
build/src/cli/dsinfer inspect --model "$model"
echo
echo "== dsinfer generate (random weights: expect gibberish) =="
build/src/cli/dsinfer generate --model "$model" --prompt "Hello! How are you today?" --max-tokens 32 --seed 1
