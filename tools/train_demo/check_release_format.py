#!/usr/bin/env python3
"""Checks release_format.py: the codecs against brute force, and the export against the engine.

1. e4m3 and e2m1 encoding of random values (and of every midpoint between two codes) equals the
   brute-force nearest code, ties to the even code; the fp8 / fp4 / Engram-row quantisers keep
   each value within half a code step of the block's scale.
2. Every quantised tensor of a release-format checkpoint (a golden fixture's), decoded, quantised
   again and decoded, gives the same values; written as a new checkpoint (the other tensors, the
   config, the tokenizer and the Engram token map as they are), `dsinfer logits` gives the same bytes on both.

    python3 tools/train_demo/check_release_format.py \\
        --checkpoint tests/data/v41-tiny-a/checkpoint --dsinfer build/src/cli/dsinfer
"""
import argparse
import filecmp
import json
import os
import shutil
import subprocess
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import release_format as rf  # noqa: E402


def brute_nearest(x, values, even_of):
    """Per element of x: the index of the nearest of `values` (finite), ties to the even code."""
    d = (x[:, None] - values[None, :]).abs()
    d[:, torch.isnan(values)] = float("inf")
    best = d.min(dim=1, keepdim=True).values
    tied = d == best
    # Among tied codes prefer the even one; a tie of +0 / -0 is resolved by the sign of x.
    score = tied.float() * 2 + (tied & even_of[None, :]).float()
    score += (tied & (torch.signbit(values)[None, :] == torch.signbit(x)[:, None])).float() * 4
    return score.argmax(dim=1)


def check_codecs():
    g = torch.Generator().manual_seed(7)
    e4m3_even = torch.tensor([(c & 1) == 0 for c in range(256)])
    finite = rf.E4M3[~torch.isnan(rf.E4M3)]
    mids = (finite.sort().values[1:] + finite.sort().values[:-1]) / 2
    x = torch.cat([torch.randn(20000, generator=g) * 100, mids, finite]).clamp(-448, 448)
    got = rf.e4m3_encode(x).to(torch.int64)
    want = brute_nearest(x, rf.E4M3, e4m3_even)
    assert torch.equal(rf.E4M3[got], rf.E4M3[want]), "e4m3: not the nearest code, ties to even"
    e2m1_even = torch.tensor([(c & 1) == 0 for c in range(16)])
    y = torch.cat([torch.rand(20000, generator=g) * 12 - 6, (rf.E2M1[1:8] + rf.E2M1[:7]) / 2, rf.E2M1])
    got = rf.e2m1_encode(y).to(torch.int64)
    want = brute_nearest(y, rf.E2M1, e2m1_even)
    assert torch.equal(rf.E2M1[got], rf.E2M1[want]), "e2m1: not the nearest code, ties to even"
    # Quantisers: within half a step of the code grid (relative 2^-4 for e4m3, 2^-2 for e2m1, plus
    # the subnormal / smallest step at the block's scale).
    w = torch.randn(70, 96, generator=g) * torch.logspace(-3, 1, 96)[None, :]
    codes, scales = rf.quantize_fp8_blocks(w)
    err = (rf.dequantize_fp8_blocks(codes, scales) - w).abs()
    step = rf._scale_value(scales).repeat_interleave(32, 0)[:70].repeat_interleave(32, 1)[:, :96]
    assert bool((err <= w.abs() * 2.0 ** -4 + step * 2.0 ** -10).all()), "fp8 blocks: error past half a step"
    packed, scales = rf.quantize_fp4_rows(w)
    err = (rf.dequantize_fp4_rows(packed, scales) - w).abs()
    step = rf._scale_value(scales).repeat_interleave(32, 1)
    assert bool((err <= w.abs() * 2.0 ** -2 + step * 0.25).all()), "fp4 rows: error past half a step"
    codes, scales = rf.quantize_rows_fp8(w)
    err = (rf.dequantize_rows_fp8(codes, scales) - w).abs()
    step = rf._scale_value(scales).repeat_interleave(32, 1)
    assert bool((err <= w.abs() * 2.0 ** -4 + step * 2.0 ** -10).all()), "fp8 rows: error past half a step"
    print("codecs: e4m3 and e2m1 nearest ties-to-even on 20,000 values and every midpoint; quantisers in bounds")


def requantised(tensors):
    """The checkpoint's quantised tensors decoded and quantised again (the rest as they are)."""
    out, count = dict(tensors), 0
    for name, (dtype, w) in tensors.items():
        if not name.endswith(".weight") or dtype not in ("F8_E4M3", "I8"):
            continue
        scale_name = name[: -len("weight")] + "scale"
        _, s = tensors[scale_name]
        if dtype == "I8":
            values = rf.dequantize_fp4_rows(w, s)
            codes, scales = rf.quantize_fp4_rows(values)
            again = rf.dequantize_fp4_rows(codes, scales)
        elif s.shape[0] == w.shape[0]:  # an Engram table: a scale per 32 values of each row
            values = rf.dequantize_rows_fp8(w, s)
            codes, scales = rf.quantize_rows_fp8(values)
            again = rf.dequantize_rows_fp8(codes, scales)
        else:
            values = rf.dequantize_fp8_blocks(w, s)
            codes, scales = rf.quantize_fp8_blocks(values)
            again = rf.dequantize_fp8_blocks(codes, scales)
        assert torch.equal(again, values), f"{name}: the values changed on the way back"
        out[name], out[scale_name] = (dtype, codes), ("F8_E8M0", scales)
        count += 1
    return out, count


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoint", required=True, help="a release-format checkpoint folder")
    ap.add_argument("--dsinfer", help="the dsinfer binary: also compare its logits on both checkpoints")
    a = ap.parse_args()
    check_codecs()
    tensors = rf.read_checkpoint(a.checkpoint)
    out, count = requantised(tensors)
    changed = sum(not torch.equal(out[n][1], tensors[n][1]) for n in tensors)
    print(f"{a.checkpoint}: {count} quantised tensors decoded, quantised again and decoded to the same values "
          f"({changed} tensors with other codes or scales)")
    if not a.dsinfer:
        return
    with tempfile.TemporaryDirectory() as tmp:
        again = os.path.join(tmp, "requantised")
        rf.write_checkpoint(again, out)
        shards = set(rf.checkpoint_shards(a.checkpoint)) | {"model.safetensors.index.json"}
        for name in os.listdir(a.checkpoint):  # the config, the tokenizer, the Engram token map
            if name not in shards:
                shutil.copy(os.path.join(a.checkpoint, name), again)
        prompts = os.path.join(tmp, "prompts.json")
        with open(prompts, "w") as f:
            json.dump({"prompts": [[1, 40, 41, 42, 43, 44], [1, 300, 17]]}, f)
        for model, logits in ((a.checkpoint, "a.safetensors"), (again, "b.safetensors")):
            subprocess.run([a.dsinfer, "logits", "--model", model, "--prompts", prompts, "--steps", "4", "--out",
                            os.path.join(tmp, logits)], check=True, stdout=subprocess.DEVNULL)
        same = filecmp.cmp(os.path.join(tmp, "a.safetensors"), os.path.join(tmp, "b.safetensors"), shallow=False)
        print(f"dsinfer logits on the written checkpoint: {'the same bytes' if same else 'DIFFERENT'}")
        if not same:
            sys.exit(1)


if __name__ == "__main__":
    main()
