#!/usr/bin/env python3
"""model.py's DSpark drafter against the drafter fixture (v41-tiny-dspark): the target's main hidden
states of the prompt, and every draft call of the golden run fed the golden main hidden states,
anchors and Markov tokens (the fixture's "drafter only" check): base logits, confidence, drafts.

    python3 tools/train_demo/check_dspark.py --fixture tests/data/v41-tiny-dspark
"""
import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import model as m  # noqa: E402
import release_format as rf  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fixture", required=True)
    a = ap.parse_args()
    with open(os.path.join(a.fixture, "checkpoint", "config.json")) as f:
        cfg = json.load(f)
    w = m.Weights(os.path.join(a.fixture, "checkpoint"))
    g = {k: v[1] for k, v in rf.read_safetensors(os.path.join(a.fixture, "golden.safetensors")).items()}
    prompts = g["prompt_ids"].long()
    taps = []
    with torch.no_grad():
        m.prefill(w, cfg, prompts, taps=taps)
    want = g["main_hidden_prefill"].flatten(0, 1)
    d = (taps[0] - want).abs()
    print(f"main hidden of the prompts (end to end through the backbone): max |d| {d.max():.4f}, "
          f"{(d == 0).float().mean() * 100:.1f} % bit-equal")
    hidden = torch.cat([g["main_hidden_prefill"], g["main_hidden_decode"]], dim=1)  # positions 0 .. t - 1
    b, t = hidden.shape[0], hidden.shape[1]
    anchors = g["spec_start_pos"].long()
    out = g["spec_out"].long()
    with torch.no_grad():
        base, confidence = m.draft(w, cfg, hidden.flatten(0, 1), torch.zeros(b, t, dtype=torch.long), anchors,
                                   out[:, :, :-1])
    db, dc = (base - g["spec_base"]).abs(), (confidence - g["spec_confidence"]).abs()
    drafts = (base.argmax(-1) == out[:, :, 1:]).float().mean()
    print(f"drafter only ({len(anchors)} calls of {b} sequences): base max |d| {db.max():.4f} "
          f"({(db == 0).float().mean() * 100:.1f} % bit-equal), confidence max |d| {dc.max():.4f}, "
          f"drafted tokens equal {drafts * 100:.1f} %")


if __name__ == "__main__":
    main()
