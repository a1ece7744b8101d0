#!/usr/bin/env bash
# The README's first command: install dependencies, build, and run the main job on the built-in
# tiny model (created once in the cache folder). Until the text generation issue lands, the main
# job is `dsinfer inspect` of that checkpoint.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
model="${XDG_CACHE_HOME:-$HOME/.cache}/dsinfer/tiny-v41"
if [ ! -f "$model/config.json" ]; then build/src/cli/dsinfer make-tiny --out "$model"; fi
build/src/cli/dsinfer inspect --model "$model"
