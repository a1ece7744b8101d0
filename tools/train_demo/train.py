#!/usr/bin/env python3
"""Trains the demo model, a small V4.1 with every mechanism of the architecture and the DSpark
drafter, on a text and exports it in the official release format (issue 23).

The architecture is DEMO_CONFIG (the release's config layout) with the vocabulary of the given
tokenizer. Each step takes --batch windows of --seq tokens of the text (BOS first) through
model.py's forward with the release's fake quantisation in it (straight-through gradients):
the backbone learns the next token; the drafter learns, from the backbone's main hidden states
(held fixed), the backbone's own distributions of the B tokens after each anchor (every
--anchor-stride-th position; distilled, teacher-forced through its Markov head), and its
confidence head whether each draft is the backbone's greedy pick. Both
share one AdamW (warm-up, then cosine decay); the drafter's loss does not reach the shared
embedding and head. The export is the release format (release_format.py) with the config, the
tokenizer and a record (the command, seed, steps, loss curves, the held-out perplexity model.py
measured on the trained and on the exported weights).

    python3 tools/train_demo/train.py --text train.txt --heldout heldout.txt --tokenizer tokenizer.json \\
        --dsinfer build/src/cli/dsinfer --out demo-model [--device cuda] [--steps 2000] [--seq 256] [--batch 16]

--text and --heldout are text files (tokenized by `dsinfer tokenize`, so the ids are the engine's)
or .pt files of ids that --save-ids wrote, for a machine without the engine.
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
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import engram_tables as et  # noqa: E402
import inventory  # noqa: E402
import model as m  # noqa: E402
import release_format as rf  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
TOKENIZER_CONFIG = os.path.join(HERE, "..", "..", "tests", "data", "v41-tiny-a", "checkpoint", "tokenizer_config.json")

# Every mechanism at a small size: two window-only layers, a compressed layer of ratio 2 and one of
# ratio 1 (both kv sources, the latter the candidate-block source), a reindexing and a reusing
# layer, Engram on two layers, MoE with a shared expert, three DSpark stages tapping layers 3-5.
DEMO_CONFIG = {
    "dtype": "fp8", "expert_dtype": "fp4", "n_shared_experts": 1, "n_activated_experts": 2,
    "score_func": "sqrtsoftplus", "gate_temp": 1.0, "norm_topk_prob": True, "route_scale": 1.5,
    "swiglu_limit": 10.0, "norm_eps": 1e-6, "o_groups": 2, "compress_rope_theta": 160000.0,
    "rope_theta": 10000.0, "rope_factor": 16, "beta_fast": 32, "beta_slow": 1, "hc_mult": 4,
    "hc_sinkhorn_iters": 20, "hc_eps": 1e-06, "vision_n_layers": 0,
    "dim": 256, "moe_inter_dim": 192, "n_layers": 6, "n_heads": 4, "n_routed_experts": 8, "q_lora_rank": 128,
    "head_dim": 128, "rope_head_dim": 32, "o_lora_rank": 128, "window_size": 64,
    "compress_ratios": [0, 0, 2, 1, 1, 1, 0, 0, 0], "kv_source_layers": [2, 3], "index_source_layers": [2, 3, 4],
    "original_seq_len": 4096, "index_n_heads": 4, "index_head_dim": 64, "index_topk": 32,
    "candidate_source_layer": 3, "candidate_topk_blocks": 8, "candidate_block_size": 8,
    "engram_layer_ids": [1, 4], "engram_max_ngram_size": 4, "engram_vocab_size": 1500, "engram_n_heads": 2,
    "engram_head_dim": 32, "engram_pad_id": 2,
    "n_mtp_layers": 3, "dspark_block_size": 5, "dspark_noise_token_id": 2, "dspark_target_layer_ids": [3, 4, 5],
    "dspark_markov_rank": 32, "dspark_n_routed_experts": 8, "dspark_n_activated_experts": 3,
}


def tokenize(dsinfer, tokenizer, text_file):
    """The text's ids by the engine's tokenizer, BOS (id 0) first."""
    if text_file.endswith(".pt"):
        return torch.load(text_file).long()
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
    return torch.tensor([0] + json.loads(out)["ids"], dtype=torch.long)


def make_config(tokenizer):
    cfg = dict(DEMO_CONFIG)
    tmap = et.token_map(tokenizer)
    cfg["vocab_size"] = len(tmap)
    cfg["engram_compressed_vocab_size"] = int(tmap.max()) + 1
    _, primes, _ = et.hash_tables(cfg, cfg["engram_compressed_vocab_size"])
    cfg["engram_num_embeddings"] = [int(p.sum()) for p in primes]
    return cfg, tmap


def initial_weights(cfg, seed, device):
    """Every tensor of the config drawn afresh: norms and scales 1, biases and sinks 0, tables and the
    embedding N(0, 0.5^2), the rest N(0, 1 / fan-in)."""
    g = torch.Generator().manual_seed(seed)
    values, formats = {}, {}
    for name, (shape, kind) in sorted(inventory.tensors(cfg).items()):
        if name.endswith("norm.weight") or name.endswith("_scale"):
            v = torch.ones(shape)
        elif name.endswith("_base") or name.endswith("attn_sink") or name.endswith("gate.bias"):
            v = torch.zeros(shape)
        elif name.endswith("engram.embed.weight") or name in ("embed.weight",) or "markov_head.embed" in name:
            v = torch.randn(shape, generator=g) * 0.5
        else:
            v = torch.randn(shape, generator=g) / math.sqrt(shape[-1])
        values[name], formats[name] = v.to(device), kind
    return m.TrainableWeights(values, formats)


class SharedFixed:
    """The weights as the drafter's loss sees them: the embedding and head it shares with the
    backbone held fixed."""

    def __init__(self, w):
        self.w = w

    def __getitem__(self, name):
        x = self.w[name]
        return x.detach() if name in ("embed.weight", "head.weight") else x


def windows_nll(w, cfg, ids, window, hashes_of, device):
    """Mean next-token NLL of ids in windows of `window` positions, consecutive windows sharing a
    token, each a fresh sequence (as `dsinfer perplexity` counts)."""
    total, count = 0.0, 0
    with torch.no_grad():
        for first in range(0, len(ids) - 1, window - 1):
            part = ids[first: first + window]
            logits = m.prefill(w, cfg, part.to(device), hashes_of(part).to(device))
            total += F.cross_entropy(logits[:-1], part[1:].to(device), reduction="sum").item()
            count += len(part) - 1
    return total / count


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--text", required=True)
    ap.add_argument("--heldout", required=True)
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--dsinfer", help="the engine: tokenizes .txt inputs, then measures the export's perplexity")
    ap.add_argument("--out", required=True)
    ap.add_argument("--save-ids", help="write the tokenized text and held-out text as PREFIX.train.pt, .heldout.pt")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--anchor-stride", type=int, default=4, help="draft anchors every N positions of a window")
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--max-minutes", type=float, help="stop early (the record says so) once training took this long")
    ap.add_argument("--heldout-tokens", type=int, default=4096)
    ap.add_argument("--heldout-window", type=int, default=512)
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    random.seed(a.seed)
    cfg, tmap = make_config(a.tokenizer)
    multipliers, primes, offsets = et.hash_tables(cfg, cfg["engram_compressed_vocab_size"])
    pad = int(tmap[cfg["engram_pad_id"]])

    def hashes_of(ids):
        return m.engram_hashes(ids, tmap, pad, multipliers, primes, offsets)

    train = tokenize(a.dsinfer, a.tokenizer, a.text)
    held = tokenize(a.dsinfer, a.tokenizer, a.heldout)
    if a.save_ids:
        torch.save(train, a.save_ids + ".train.pt")
        torch.save(held, a.save_ids + ".heldout.pt")
    held = held[: a.heldout_tokens]
    dev = torch.device(a.device)
    w = initial_weights(cfg, a.seed, dev)
    opt = torch.optim.AdamW(w.parameters(), lr=a.lr, weight_decay=0.01, betas=(0.9, 0.95))
    schedule = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / a.warmup) * (
        0.1 + 0.45 * (1 + math.cos(math.pi * min(1.0, s / a.steps)))))
    size, stride = cfg["dspark_block_size"], a.anchor_stride
    curve, draft_curve, t0, stopped = [], [], time.time(), None
    m.DENSE_EXPERTS = True
    for step in range(a.steps):
        if a.max_minutes and time.time() - t0 > 60 * a.max_minutes:
            stopped = step
            print(f"stopped after {step} steps: --max-minutes {a.max_minutes}", flush=True)
            break
        w.refresh()
        starts = [random.randrange(0, len(train) - a.seq) for _ in range(a.batch)]
        ids = torch.stack([torch.cat([torch.zeros(1, dtype=torch.long), train[s: s + a.seq - 1]]) for s in starts])
        hashes = torch.stack([hashes_of(row) for row in ids]).to(dev)
        ids = ids.to(dev)
        taps = []
        logits = m.prefill(w, cfg, ids, hashes, taps=taps)
        loss = F.cross_entropy(logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten())
        # The drafter: anchors p with a full block of targets inside the window.
        anchors = torch.arange(random.randrange(stride), a.seq - size - 1, stride, device=dev)
        rows = anchors[:, None] + 1 + torch.arange(size + 1, device=dev)[None, :]  # p + 1 .. p + B + 1
        block = ids[:, rows]  # [b, anchors, B + 1]: the anchor, then the tokens the block predicts
        base, confidence = m.draft(SharedFixed(w), cfg, taps[0].detach(), ids, anchors, block[:, :, :size])
        # Distilled: row j of p's block learns the backbone's distribution at p + 1 + j (the next
        # token after the text's prefix), and the confidence whether its pick is the backbone's,
        # which is what greedy verification accepts.
        teacher = logits.detach()[:, rows[:, :size]]  # [b, anchors, B, vocab]
        draft_loss = -(torch.softmax(teacher, -1) * torch.log_softmax(base, -1)).sum(-1).mean()
        right = (base.argmax(-1) == teacher.argmax(-1)).float()
        conf_loss = F.binary_cross_entropy_with_logits(confidence, right)
        opt.zero_grad()
        (loss + draft_loss + 0.1 * conf_loss).backward()
        torch.nn.utils.clip_grad_norm_(w.parameters(), 1.0)
        opt.step()
        schedule.step()
        curve.append(round(loss.item(), 4))
        draft_curve.append([round(draft_loss.item(), 4)] + [round(x, 4) for x in right.mean((0, 1)).tolist()])
        if step % 50 == 0 or step == a.steps - 1:
            print(f"step {step}: loss {loss.item():.4f}, draft loss {draft_loss.item():.4f}, draft rows right "
                  f"{[round(x, 3) for x in right.mean((0, 1)).tolist()]} ({time.time() - t0:.0f} s)", flush=True)
    seconds = time.time() - t0
    w.refresh()
    held_nll = windows_nll(w, cfg, held, a.heldout_window, hashes_of, dev)
    # The export: weights, config, tokenizer, then the exported (quantised) weights measured again.
    if os.path.exists(a.out):
        shutil.rmtree(a.out)
    rf.write_checkpoint(a.out, w.release_tensors(), shard_bytes=8 << 20)
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    shutil.copy(a.tokenizer, os.path.join(a.out, "tokenizer.json"))
    shutil.copy(TOKENIZER_CONFIG, a.out)
    exported = m.Weights(a.out)
    exported.t = {k: v.to(dev) for k, v in exported.t.items()}
    exported_nll = windows_nll(exported, cfg, held, a.heldout_window, hashes_of, dev)
    record = {"command": " ".join(sys.argv), "seed": a.seed, "device": torch.cuda.get_device_name(dev)
              if dev.type == "cuda" else "cpu", "torch": torch.__version__, "seconds": round(seconds, 1),
              "steps": a.steps, "stopped_after": stopped, "seq": a.seq, "batch": a.batch, "lr": a.lr,
              "warmup": a.warmup, "anchor_stride": stride, "train_tokens": len(train),
              "heldout": {"tokens": len(held), "window": a.heldout_window,
                          "perplexity_trained": round(math.exp(held_nll), 4),
                          "perplexity_exported": round(math.exp(exported_nll), 4)},
              "loss_curve": curve, "draft_curve": draft_curve}
    if a.dsinfer:
        text = subprocess.run([a.dsinfer, "detokenize", "--tokenizer", a.tokenizer, "--input", "-"], check=True,
                              input=json.dumps({"ids": held[1:].tolist()}) + "\n", capture_output=True,
                              text=True).stdout
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "heldout.txt")
            with open(path, "w", encoding="utf-8") as f:
                f.write(json.loads(text)["text"])
            record["heldout"]["dsinfer"] = subprocess.run(
                [a.dsinfer, "perplexity", "--model", a.out, "--text", path, "--context", str(a.heldout_window)],
                check=True, capture_output=True, text=True).stdout.strip()
    with open(os.path.join(a.out, "training_record.json"), "w") as f:
        json.dump(record, f, indent=1)
    print(f"{len(curve)} steps in {seconds:.0f} s; held-out perplexity {math.exp(held_nll):.3f} trained, "
          f"{math.exp(exported_nll):.3f} exported (model.py); dsinfer: {record['heldout'].get('dsinfer')}")


if __name__ == "__main__":
    main()
