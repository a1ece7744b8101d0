#!/usr/bin/env python3
"""Records the perplexity gate of an exported demo model (issue 23): a held-out excerpt copied into
the model folder as heldout.txt, tokenized by the engine (BOS first), its perplexity by model.py's
forward on the exported weights (in windows of --window positions, as `dsinfer perplexity` counts)
and by `dsinfer perplexity` on the CPU, written to training_record.json under "gate". The test
DemoModel.HeldOutPerplexityIsTheOneRecordedAtExport checks the engine against the former.

    python3 tools/train_demo/record_gate.py --model models/demo-v41 --text excerpt.txt --dsinfer build/src/cli/dsinfer
"""
import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import engram_tables as et  # noqa: E402
import model as m  # noqa: E402
import train  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--text", required=True)
    ap.add_argument("--dsinfer", required=True)
    ap.add_argument("--window", type=int, default=512)
    a = ap.parse_args()
    with open(os.path.join(a.model, "config.json")) as f:
        cfg = json.load(f)
    text_path = os.path.join(a.model, "heldout.txt")
    if os.path.abspath(a.text) != os.path.abspath(text_path):
        shutil.copy(a.text, text_path)
    tokenizer = os.path.join(a.model, "tokenizer.json")
    ids = train.tokenize(a.dsinfer, tokenizer, text_path)
    tmap = et.token_map(tokenizer)
    multipliers, primes, offsets = et.hash_tables(cfg, cfg["engram_compressed_vocab_size"])
    pad = int(tmap[cfg["engram_pad_id"]])

    def hashes_of(x):
        return m.engram_hashes(x, tmap, pad, multipliers, primes, offsets)

    mine = math.exp(train.windows_nll(m.Weights(a.model), cfg, ids, a.window, hashes_of, "cpu"))
    out = subprocess.run([a.dsinfer, "perplexity", "--model", a.model, "--text", text_path, "--context",
                          str(a.window)], check=True, capture_output=True, text=True).stdout
    engine = float(re.search(r"perplexity ([0-9.]+)", out).group(1))
    record_path = os.path.join(a.model, "training_record.json")
    with open(record_path) as f:
        record = json.load(f)
    record["gate"] = {"text": "heldout.txt", "tokens": len(ids), "window": a.window,
                      "perplexity_model_py": round(mine, 4), "perplexity_dsinfer_cpu": round(engine, 4)}
    with open(record_path, "w") as f:
        json.dump(record, f, indent=1)
    print(f"{len(ids)} tokens: perplexity {mine:.4f} by model.py, {engine:.4f} by dsinfer on the CPU "
          f"({(engine / mine - 1) * 100:+.3f} %)")


if __name__ == "__main__":
    main()
