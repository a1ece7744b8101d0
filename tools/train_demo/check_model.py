#!/usr/bin/env python3
"""model.py against a golden fixture of one prompt (v41-tiny-a): the Engram hashes, each layer fed
the reference's own input (its output, experts, top-k and candidate pools), and the prompt end to
end (the last position's logits).

    python3 tools/train_demo/check_model.py --fixture tests/data/v41-tiny-a
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import engram_tables as et  # noqa: E402
import model as m  # noqa: E402
import release_format as rf  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fixture", required=True)
    ap.add_argument("--dsinfer", help="the dsinfer binary: also export the trained weights and compare its logits")
    a = ap.parse_args()
    with open(os.path.join(a.fixture, "checkpoint", "config.json")) as f:
        cfg = json.load(f)
    w = m.Weights(os.path.join(a.fixture, "checkpoint"))
    golden = rf.read_safetensors(os.path.join(a.fixture, "golden.safetensors"))
    debug = rf.read_safetensors(os.path.join(a.fixture, "golden_debug.safetensors"))
    ids = golden["prompt_ids"][1][0].long()
    h, pre = m.embed(w, cfg, ids)
    engram_layers = cfg.get("engram_layer_ids", [])
    hashes = None
    if engram_layers:
        # Engram's tables made from the tokenizer and the config, against the reference's.
        tmap = et.token_map(os.path.join(a.fixture, "checkpoint", "tokenizer.json"))
        want_map = rf.read_safetensors(os.path.join(a.fixture, "checkpoint", "engram_token_map.safetensors"))
        compressed = int(tmap.max()) + 1
        multipliers, primes, offsets = et.hash_tables(cfg, compressed)
        print(f"Engram tables equal the reference's: token map {torch.equal(tmap, want_map['token_map'][1])} "
              f"({compressed} compressed ids, config {cfg['engram_compressed_vocab_size']}), multipliers "
              f"{torch.equal(multipliers, debug['engram.multipliers'][1])}, primes "
              f"{torch.equal(primes, debug['engram.primes'][1])}, offsets {torch.equal(offsets, debug['engram.offsets'][1])}")
        hashes = m.engram_hashes(ids, tmap, int(tmap[cfg["engram_pad_id"]]), multipliers, primes, offsets)
        print(f"Engram hashes equal the reference's: {torch.equal(hashes, debug['step00.engram_hashes'][1][0])}")
    # Each layer from the reference's own input (the previous layer's output and pre-mix), so that
    # a layer's differences are its own.
    shared = {}
    for l in range(cfg["n_layers"]):
        if l:
            h = debug[f"step00.layer{l - 1}.out"][1][0].float()
            pre = debug[f"step00.layer{l - 1}.ffn_pre"][1][0]
        if l in engram_layers:
            h = m.engram(w, cfg, l, h, hashes[:, engram_layers.index(l)])
            d = (h - debug[f"step00.layer{l}.engram_out"][1][0].float()).abs()
            print(f"layer {l} Engram: max |d| {d.max():.4g}, {(d == 0).float().mean() * 100:.1f} % bit-equal")
        cos, sin = m.rope_table(cfg, l, len(ids))
        h, pre, idx = m.block(w, cfg, l, h, pre, cos, sin, shared)
        if f"step00.layer{l}.topk_idxs" in debug:
            want_topk = debug[f"step00.layer{l}.topk_idxs"][1][0].long()
            got = torch.where(shared["topk"][0] >= 0, shared["topk"][0] + len(ids), -1)
            print(f"layer {l}: top-k equal on {(got == want_topk).all(-1).float().mean() * 100:.0f} % of queries")
        if f"step00.layer{l}.candidates" in debug:
            same = (shared["candidates"][0] == debug[f"step00.layer{l}.candidates"][1][0].bool()).all(-1)
            print(f"layer {l}: candidate pool equal on {same.float().mean() * 100:.0f} % of queries")
        want = debug[f"step00.layer{l}.out"][1][0].float()
        gates = debug[f"step00.layer{l}.gate_indices"][1].long()
        d = (h - want).abs()
        same_gates = (idx.sort(-1).values == gates.sort(-1).values).all(-1).float().mean()
        print(f"layer {l}: max |d out| {d.max():.4g} (rms of out {want.pow(2).mean().sqrt():.4g}), "
              f"{(d == 0).float().mean() * 100:.1f} % bit-equal, gates equal on {same_gates * 100:.0f} % of tokens, "
              f"max |d ffn_pre| {(pre - debug[f'step00.layer{l}.ffn_pre'][1][0]).abs().max():.3g}")
    # The whole prompt end to end: the last position's logits against the reference's first row.
    logits = m.prefill(w, cfg, ids, hashes if engram_layers else None)[-1]
    want = golden["logits"][1][0, 0]
    print(f"prefill end to end: max |d logit| {(logits - want).abs().max():.4f} at the last prompt position, "
          f"argmax {'equal' if logits.argmax() == want.argmax() else 'DIFFERENT'}")

    # Trainable: the prompt's next-token loss falls after one gradient step on the fake-quantised
    # weights (straight-through), which start as the checkpoint's values.
    tw = m.TrainableWeights.from_weights(w, os.path.join(a.fixture, "checkpoint"))
    opt = torch.optim.SGD(tw.parameters(), lr=0.05)
    losses = []
    for _ in range(2):
        loss = torch.nn.functional.cross_entropy(m.prefill(tw, cfg, ids, hashes)[:-1], ids[1:])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    print(f"one training step on the prompt: loss {losses[0]:.4f} -> {losses[1]:.4f}")
    if not a.dsinfer:
        return
    # Exported in the release format, the trained weights give dsinfer the logits model.py gives.
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "trained")
        rf.write_checkpoint(out, tw.release_tensors())
        folder = os.path.join(a.fixture, "checkpoint")
        shards = set(rf.checkpoint_shards(folder)) | {"model.safetensors.index.json"}
        for name in os.listdir(folder):
            if name not in shards:
                shutil.copy(os.path.join(folder, name), out)
        prompts, logits_file = os.path.join(tmp, "prompts.json"), os.path.join(tmp, "logits.safetensors")
        with open(prompts, "w") as f:
            json.dump({"prompts": [ids.tolist()]}, f)
        subprocess.run([a.dsinfer, "logits", "--model", out, "--prompts", prompts, "--steps", "1", "--out",
                        logits_file], check=True, stdout=subprocess.DEVNULL)
        engine = rf.read_safetensors(logits_file)["logits"][1].reshape(-1, cfg["vocab_size"])[0]
        with torch.no_grad():
            mine = m.prefill(m.Weights(out), cfg, ids, hashes)[-1]
        print(f"the trained weights exported: dsinfer's logits against model.py's max |d| "
              f"{(engine - mine).abs().max():.4f}, argmax {'equal' if engine.argmax() == mine.argmax() else 'DIFFERENT'}")


if __name__ == "__main__":
    main()
