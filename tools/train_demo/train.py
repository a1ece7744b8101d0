#!/usr/bin/env python3
"""Trains a small V4.1 model on a text and exports it in the official release format (issue 23).

The architecture is a config in the release's layout (by default v41-tiny-a's shapes, every
mechanism of the backbone) with the vocabulary of the given tokenizer; the text is tokenized by
`dsinfer tokenize`, so the ids are the engine's. Training runs model.py's forward with the
release's fake quantisation in it (straight-through), AdamW, on --batch windows of --seq tokens a
step, BOS first. On the CPU for now (a GPU run is issue 23's next step).
The export is the release format (release_format.py) with the config, the tokenizer and a record
(the command, the seed, the loss curve, the held-out perplexity model.py measured), and is checked
against the engine: `dsinfer perplexity` of the held-out text on the export.

    python3 tools/train_demo/train.py --text train.txt --heldout heldout.txt --tokenizer tokenizer.json \\
        --dsinfer build/src/cli/dsinfer --out demo-model [--steps 200] [--seq 128] [--batch 1]
Not yet: DSpark's stages (the export has none, so the engine does not speculate with it).
"""
import argparse
import json
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import engram_tables as et  # noqa: E402
import model as m  # noqa: E402
import release_format as rf  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
BASE = os.path.join(HERE, "..", "..", "tests", "data", "v41-tiny-a", "checkpoint")


def tokenize(dsinfer, tokenizer, text_file, max_tokens):
    """The text's ids by the engine's tokenizer, BOS first (id 0 in this layout)."""
    with open(text_file, encoding="utf-8") as f:
        text = f.read()
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        f.write(json.dumps({"text": text}) + "\n")
        path = f.name
    try:
        out = subprocess.run([dsinfer, "tokenize", "--tokenizer", tokenizer, "--input", path], check=True,
                             capture_output=True, text=True).stdout
    finally:
        os.unlink(path)
    ids = json.loads(out)["ids"]
    return torch.tensor([0] + ids[: max_tokens - 1], dtype=torch.long)


def make_config(base_cfg, tokenizer):
    cfg = dict(base_cfg)
    tmap = et.token_map(tokenizer)
    cfg["vocab_size"] = len(tmap)
    cfg["engram_compressed_vocab_size"] = int(tmap.max()) + 1
    _, primes, _ = et.hash_tables(cfg, cfg["engram_compressed_vocab_size"])
    cfg["engram_num_embeddings"] = [int(p.sum()) for p in primes]
    return cfg, tmap


def initial_weights(cfg, seed):
    """The base checkpoint's tensors and formats, vocabulary and Engram rows resized, drawn afresh."""
    base = m.TrainableWeights.from_weights(m.Weights(BASE), BASE)
    g = torch.Generator().manual_seed(seed)
    values = {}
    for name in base.names:
        shape = list(base.params[base.index[name]].shape)
        if name in ("embed.weight", "head.weight"):
            shape[0] = cfg["vocab_size"]
        if name.endswith("engram.embed.weight"):
            layer = int(name.split(".")[1])
            shape[0] = cfg["engram_num_embeddings"][cfg["engram_layer_ids"].index(layer)]
        if name.endswith("norm.weight") or name.endswith("_scale"):
            v = torch.ones(shape)
        elif name.endswith("_base") or name.endswith("attn_sink") or name.endswith("gate.bias"):
            v = torch.zeros(shape)
        elif name.endswith("engram.embed.weight") or name == "embed.weight":
            v = torch.randn(shape, generator=g) * 0.5
        else:
            v = torch.randn(shape, generator=g) / math.sqrt(shape[-1])
        values[name] = v
    return m.TrainableWeights(values, base.formats)


def nll(w, cfg, ids, hashes_of):
    logits = m.prefill(w, cfg, ids, hashes_of(ids))
    return torch.nn.functional.cross_entropy(logits[:-1], ids[1:])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--text", required=True)
    ap.add_argument("--heldout", required=True)
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--dsinfer", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--batch", type=int, default=1, help="windows a step (their gradients added)")
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--heldout-tokens", type=int, default=512)
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    random.seed(a.seed)
    with open(os.path.join(BASE, "config.json")) as f:
        cfg, tmap = make_config(json.load(f), a.tokenizer)
    multipliers, primes, offsets = et.hash_tables(cfg, cfg["engram_compressed_vocab_size"])
    pad = int(tmap[cfg["engram_pad_id"]])

    def hashes_of(ids):
        return m.engram_hashes(ids, tmap, pad, multipliers, primes, offsets)

    train = tokenize(a.dsinfer, a.tokenizer, a.text, 10 ** 9)
    held = tokenize(a.dsinfer, a.tokenizer, a.heldout, a.heldout_tokens)
    w = initial_weights(cfg, a.seed)
    opt = torch.optim.AdamW(w.parameters(), lr=a.lr, weight_decay=0.0)
    curve, t0 = [], time.time()
    for step in range(a.steps):
        opt.zero_grad()
        total = 0.0
        for _ in range(a.batch):  # the batch's windows one after another, their gradients added
            at = random.randrange(1, len(train) - a.seq)
            ids = torch.cat([torch.zeros(1, dtype=torch.long), train[at: at + a.seq - 1]])  # BOS, then the text
            loss = nll(w, cfg, ids, hashes_of) / a.batch
            loss.backward()
            total += loss.item()
        opt.step()
        curve.append(round(total, 4))
        if step % 10 == 0 or step == a.steps - 1:
            print(f"step {step}: loss {total:.4f} ({time.time() - t0:.0f} s)", flush=True)
    with torch.no_grad():
        held_nll = nll(w, cfg, held, hashes_of).item()
    # The export: weights, config, tokenizer, the record.
    if os.path.exists(a.out):
        shutil.rmtree(a.out)
    rf.write_checkpoint(a.out, w.release_tensors())
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    shutil.copy(a.tokenizer, os.path.join(a.out, "tokenizer.json"))
    shutil.copy(os.path.join(BASE, "tokenizer_config.json"), a.out)
    # The exported (quantised) weights' held-out perplexity by model.py, then by the engine.
    with torch.no_grad():
        exported_nll = nll(m.Weights(a.out), cfg, held, hashes_of).item()
    text = subprocess.run([a.dsinfer, "detokenize", "--tokenizer", a.tokenizer, "--input", "-"], check=True,
                          input=json.dumps({"ids": held[1:].tolist()}) + "\n", capture_output=True, text=True).stdout
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "heldout.txt")
        with open(path, "w", encoding="utf-8") as f:
            f.write(json.loads(text)["text"])
        engine = subprocess.run([a.dsinfer, "perplexity", "--model", a.out, "--text", path], check=True,
                                capture_output=True, text=True).stdout.strip()
    record = {"command": " ".join(sys.argv), "seed": a.seed, "steps": a.steps, "seq": a.seq, "batch": a.batch, "lr": a.lr,
              "train_tokens": len(train), "heldout_tokens": len(held), "loss_curve": curve,
              "heldout_perplexity_trained": math.exp(held_nll), "heldout_perplexity_exported": math.exp(exported_nll),
              "dsinfer_perplexity": engine}
    with open(os.path.join(a.out, "training_record.json"), "w") as f:
        json.dump(record, f, indent=1)
    print(f"held-out perplexity: {math.exp(held_nll):.3f} trained, {math.exp(exported_nll):.3f} exported "
          f"(model.py); dsinfer: {engine}")


if __name__ == "__main__":
    main()
