"""Engram's fixed tables for a config and a tokenizer (model-spec.md sections 9.2-9.4), for training:
the compressed token map (tokens whose decoded text normalises alike share an id), the hash
multipliers (numpy's default_rng(10007 * layer), as the reference draws them) and the bucket primes
with their offsets. The engine derives the same from the same tokenizer and config.
"""
import json
import re
import unicodedata

import numpy as np
import torch


def _byte_decoder():
    """The byte-level alphabet's character of each byte, inverted (GPT-2's bytes_to_unicode)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    chars, n = {}, 0
    for b in range(256):
        if b in printable:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + n)
            n += 1
    return {c: b for b, c in chars.items()}


def normalize(text):
    """NFKC, NFD, combining marks dropped, lowercase, white-space runs to one space, stripped (a
    lone space survives); the original text where that leaves nothing."""
    s = unicodedata.normalize("NFD", unicodedata.normalize("NFKC", text))
    s = "".join(c for c in s if unicodedata.category(c) != "Mn").lower()
    s = re.sub(r"[ \t\r\n]+", " ", s)
    s = "\ue000" if s == " " else s.strip()
    s = s.replace("\ue000", " ")
    return s if s else text


def token_map(tokenizer_json):
    """int32 [vocab]: each token id's compressed id, in order of first appearance of its key."""
    with open(tokenizer_json, encoding="utf-8") as f:
        tok = json.load(f)
    pieces = {i: p for p, i in tok["model"]["vocab"].items()}
    added = {a["id"]: a["content"] for a in tok["added_tokens"]}
    size = max(list(pieces) + list(added)) + 1
    decoder = _byte_decoder()
    ids, out = {}, []
    for i in range(size):
        if i in added:
            raw = text = added[i]
        else:
            raw = pieces[i]
            text = bytes(decoder[c] for c in raw).decode("utf-8", errors="replace")
        key = raw if "\ufffd" in text else normalize(text)
        out.append(ids.setdefault(key, len(ids)))
    return torch.tensor(out, dtype=torch.int32)


def _is_prime(n):
    if n < 2:
        return False
    f = 2
    while f * f <= n:
        if n % f == 0:
            return False
        f += 1
    return True


def hash_tables(cfg, compressed_vocab):
    """(multipliers int64 [layers, max_ngram], primes int64 [layers, orders, heads], offsets int64
    [layers, columns]) for the config's Engram layers."""
    layers, max_n, heads = cfg["engram_layer_ids"], cfg["engram_max_ngram_size"], cfg["engram_n_heads"]
    bound = (2 ** 63 - 1) // compressed_vocab // 2
    multipliers = [np.random.default_rng(10007 * l).integers(0, bound, size=max_n, dtype=np.int64) * 2 + 1
                   for l in layers]
    used, primes = set(), []
    for _ in layers:
        per_layer = []
        for _n in range(2, max_n + 1):
            value, row = cfg["engram_vocab_size"] - 1, []
            for _h in range(heads):
                value += 1
                while not _is_prime(value) or value in used:
                    value += 1
                used.add(value)
                row.append(value)
            per_layer.append(row)
        primes.append(per_layer)
    primes = torch.tensor(primes, dtype=torch.int64)
    flat = primes.flatten(1)
    offsets = torch.cat([torch.zeros(len(layers), 1, dtype=torch.int64), flat.cumsum(1)[:, :-1]], dim=1)
    return torch.tensor(np.stack(multipliers)), primes, offsets
