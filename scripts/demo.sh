#!/usr/bin/env bash
# The README's first command: install dependencies, build, and run the main job on the demo model
# in models/demo-v41 (a 17 MB V4.1 with every mechanism of the architecture and the DSpark
# drafter, trained on the Brown corpus by tools/train_demo; its training record is beside it):
# `dsinfer inspect` of the checkpoint, a completion of a sentence, then a short two-turn chat.
# The model has read 1.5 M tokens of 1961 American English and no dialogue: expect English-like
# text that wanders, not answers.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
model=models/demo-v41
build/src/cli/dsinfer inspect --model "$model"
echo
echo "== dsinfer generate on the demo model =="
build/src/cli/dsinfer generate --model "$model" --prompt "The President said that" --max-tokens 64 \
  --temperature 0.8 --top-p 0.9 --seed 1
echo
echo "== dsinfer chat on the demo model =="
printf '%s\n' "Tell me about the city." "What happened next?" |
  build/src/cli/dsinfer chat --model "$model" --no-thinking --max-tokens 48 --temperature 0.8 --top-p 0.9 --seed 1
