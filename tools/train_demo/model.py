"""The V4.1 backbone in PyTorch, for training the demo model (issue 23): a prompt from position 0
(batch 1) through the hyper-connections with Sinkhorn, the window attention with its sink, the
compressor at ratios 1 and 2 with the compressed KV, the two-level indexer, the MoE, Engram and the
head, with the reference's rounding points (bf16 casts, act_quant, the fp4 fake quantisation of the
compressed KV and the indexer), each trained as the identity (straight-through) when the weights
are TrainableWeights. Not yet: DSpark's stages, the training loop, decode steps.
check_model.py checks it against a golden fixture.
"""
import math

import torch
import torch.nn.functional as F

import release_format as rf


def straight_through(x, rounded):
    """rounded's values with x's gradient (the rounding points train as the identity)."""
    return x + (rounded - x).detach() if x.requires_grad else rounded


def bf16(x):
    return straight_through(x, x.detach().to(torch.bfloat16).float())


def rms_norm(x, w, eps):
    x = x.float()
    n = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return bf16(n * w.float())


def act_quant(x):
    """fp8 fake quantisation in groups of 32 along the last dim (spec 3.4), bf16 values back."""
    shape = x.shape
    g = x.detach().float().reshape(-1, 32)
    amax = g.abs().amax(-1, keepdim=True).clamp(min=1e-4)
    m, e = torch.frexp(amax * (1.0 / 448.0))
    e = torch.where(m == 0.5, e - 1, e)
    s = torch.ldexp(torch.ones_like(amax), e)
    q = rf.e4m3_decode(rf.e4m3_encode((g / s).clamp(-448, 448)))
    return straight_through(x.float(), (q * s).to(torch.bfloat16).float().reshape(shape))


def linear_q(x, w):
    """A block-scaled linear: the input fake-quantised, fp32 sums, bf16 out (spec 3.6)."""
    return bf16(act_quant(x) @ w.t())


def rope_table(cfg, layer, n):
    ratio = cfg["compress_ratios"][layer]
    base = cfg["compress_rope_theta"] if ratio else cfg["rope_theta"]
    d = cfg["rope_head_dim"]
    f = 1.0 / torch.pow(torch.tensor(base, dtype=torch.float32), torch.arange(0, d, 2, dtype=torch.float32) / d)
    if ratio and cfg.get("original_seq_len", 0) > 0:
        orig, factor = cfg["original_seq_len"], cfg["rope_factor"]

        def cd(r):
            return d * math.log(orig / (r * 2 * math.pi)) / (2 * math.log(base))

        low, high = max(math.floor(cd(cfg["beta_fast"])), 0), min(math.ceil(cd(cfg["beta_slow"])), d - 1)
        ramp = ((torch.arange(d // 2, dtype=torch.float32) - low) / max(high - low, 1e-3)).clamp(0, 1)
        smooth = 1 - ramp
        f = f / factor * (1 - smooth) + f * smooth
    angle = torch.arange(n, dtype=torch.float32)[:, None] * f[None, :]
    return torch.cos(angle), torch.sin(angle)


def rope(x, cos, sin, inverse=False):
    """Interleaved RoPE on the last rope dims of x [..., t, (heads,) d]; cos/sin [t, d/2]."""
    d = cos.shape[-1] * 2
    head, tail = x[..., :-d], x[..., -d:].float()
    re, im = tail[..., 0::2], tail[..., 1::2]
    while cos.dim() < re.dim():
        cos, sin = cos.unsqueeze(-2), sin.unsqueeze(-2)
    if inverse:
        re2, im2 = re * cos + im * sin, -re * sin + im * cos
    else:
        re2, im2 = re * cos - im * sin, re * sin + im * cos
    out = torch.stack([re2, im2], dim=-1).flatten(-2)
    return torch.cat([head, bf16(out)], dim=-1)


class Weights:
    """The checkpoint's tensors decoded to fp32 (quantised ones through release_format)."""

    def __init__(self, folder):
        raw = rf.read_checkpoint(folder)
        self.t = {}
        for name, (dtype, x) in raw.items():
            if name.endswith(".scale"):
                continue
            if dtype == "I8":
                x = rf.dequantize_fp4_rows(x, raw[name[:-6] + "scale"][1])
            elif dtype == "F8_E4M3":
                s = raw[name[:-6] + "scale"][1]
                x = rf.dequantize_rows_fp8(x, s) if s.shape[0] == x.shape[0] else rf.dequantize_fp8_blocks(x, s)
            self.t[name] = x.float()

    def __getitem__(self, name):
        return self.t[name]


class TrainableWeights(torch.nn.Module):
    """fp32 master weights of every tensor, seen by the forward as the release will hold them: the
    fp8 blocks, fp4 rows, Engram rows and bf16 tensors fake-quantised with straight-through
    gradients (`formats`: a name's release dtype and scale layout, as in a checkpoint)."""

    def __init__(self, values, formats):
        super().__init__()
        self.names = sorted(values)
        self.params = torch.nn.ParameterList([torch.nn.Parameter(values[n].float().clone()) for n in self.names])
        self.index = {n: i for i, n in enumerate(self.names)}
        self.formats = formats

    @staticmethod
    def from_weights(w, folder):
        raw = rf.read_checkpoint(folder)
        formats = {}
        for name, (dtype, x) in raw.items():
            if name.endswith(".scale"):
                continue
            if dtype == "F8_E4M3":
                rows = raw[name[:-6] + "scale"][1].shape[0] == x.shape[0]
                formats[name] = "fp8_rows" if rows else "fp8_blocks"
            else:
                formats[name] = {"I8": "fp4_rows", "BF16": "bf16"}.get(dtype, "f32")
        return TrainableWeights(w.t, formats)

    def __getitem__(self, name):
        x = self.params[self.index[name]]
        kind = self.formats[name]
        with torch.no_grad():
            if kind == "fp8_blocks":
                q = rf.dequantize_fp8_blocks(*rf.quantize_fp8_blocks(x))
            elif kind == "fp8_rows":
                q = rf.dequantize_rows_fp8(*rf.quantize_rows_fp8(x))
            elif kind == "fp4_rows":
                q = rf.dequantize_fp4_rows(*rf.quantize_fp4_rows(x))
            elif kind == "bf16":
                q = x.to(torch.bfloat16).float()
            else:
                q = x
        return straight_through(x, q)

    def release_tensors(self):
        """Every tensor as the release stores it (names, dtypes, scales), for rf.write_checkpoint."""
        out = {}
        with torch.no_grad():
            for name in self.names:
                x, kind = self.params[self.index[name]].detach(), self.formats[name]
                scale = name[: -len("weight")] + "scale"
                if kind == "fp8_blocks":
                    codes, scales = rf.quantize_fp8_blocks(x)
                    out[name], out[scale] = ("F8_E4M3", codes), ("F8_E8M0", scales)
                elif kind == "fp8_rows":
                    codes, scales = rf.quantize_rows_fp8(x)
                    out[name], out[scale] = ("F8_E4M3", codes), ("F8_E8M0", scales)
                elif kind == "fp4_rows":
                    codes, scales = rf.quantize_fp4_rows(x)
                    out[name], out[scale] = ("I8", codes), ("F8_E8M0", scales)
                elif kind == "bf16":
                    out[name] = ("BF16", x.to(torch.bfloat16))
                else:
                    out[name] = ("F32", x.float())
        return out


def hc_mixes(x, fn, scale, base, cfg):
    """x [t, hc, dim] -> pre [t, hc], post [t, hc], comb [t, hc, hc] (spec 4.1)."""
    hc, eps = cfg["hc_mult"], cfg["hc_eps"]
    xf = x.float().flatten(1)
    r = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + cfg["norm_eps"])
    m = (xf @ fn.t()) * r
    pre = torch.sigmoid(m[:, :hc] * scale[0] + base[:hc]) + eps
    post = 2 * torch.sigmoid(m[:, hc:2 * hc] * scale[1] + base[hc:2 * hc])
    c = (m[:, 2 * hc:] * scale[2] + base[2 * hc:]).view(-1, hc, hc)
    c = torch.softmax(c, dim=-1) + eps
    c = c / (c.sum(-2, keepdim=True) + eps)
    for _ in range(cfg["hc_sinkhorn_iters"] - 1):
        c = c / (c.sum(-1, keepdim=True) + eps)
        c = c / (c.sum(-2, keepdim=True) + eps)
    return pre, post, c


def hc_pre(x, pre):
    return bf16((pre[:, :, None] * x.float()).sum(1))


def hc_post(b, r, post, comb):
    return bf16(post[:, :, None] * b.float()[:, None, :] + torch.einsum("tij,tid->tjd", comb, r.float()))


def fp4_quant(x, block, e4m3_scale):
    """fp4 fake quantisation in groups of `block` (spec 3.5): e4m3 scales (the compressed KV) or
    power-of-two ones (the indexer's q and k), bf16 values back."""
    shape = x.shape
    g = x.detach().float().reshape(-1, block)
    amax = g.abs().amax(-1, keepdim=True)
    if e4m3_scale:
        s = rf.e4m3_decode(rf.e4m3_encode((amax.clamp(min=6 * 2.0 ** -9) / 6).clamp(max=448)))
    else:
        m, e = torch.frexp(amax.clamp(min=6 * 2.0 ** -126) * (1.0 / 6))
        s = torch.ldexp(torch.ones_like(amax), torch.where(m == 0.5, e - 1, e))
    q = rf.e2m1_decode(rf.e2m1_encode((g / s).clamp(-6, 6)))
    return straight_through(x.float(), (q * s).to(torch.bfloat16).float().reshape(shape))


def sparse_attention(q, kv, idx, sink, scale):
    """q [t, heads, d], kv [rows, d], idx [t, slots] (rows, -1 for none), sink [heads] (spec 5.3)."""
    rows = kv[idx.clamp(min=0)]  # [t, slots, d]
    scores = torch.einsum("thd,tld->thl", q, rows) * scale
    scores = scores.masked_fill((idx < 0)[:, None, :], float("-inf"))
    mx = scores.amax(-1, keepdim=True)  # the running max of the scores alone; the sink only divides
    e = torch.exp(scores - mx)
    o = torch.einsum("thl,tld->thd", bf16(e), rows) / (e.sum(-1, keepdim=True) + torch.exp(sink[None, :, None] - mx))
    return bf16(o)


def window_indices(t, window):
    """Prefill: query p's window rows max(p - window + 1, 0) + j, those past p as -1 (spec 5.2)."""
    width = min(t, window)
    rows = (torch.arange(t)[:, None] - window + 1).clamp(min=0) + torch.arange(width)[None, :]
    return torch.where(rows <= torch.arange(t)[:, None], rows, -1)


def compress(w, cfg, l, x):
    """The kv source's pre-RoPE latents of the prompt's complete groups (spec 6.1), [n, head_dim]."""
    p = f"layers.{l}.attn.compressor."
    r = cfg["compress_ratios"][l]
    if r == 1:
        return rms_norm(bf16(x @ w[p + "wkv.weight"].t()), w[p + "norm.weight"], cfg["norm_eps"])
    n = x.shape[0] // r
    kv = (x.float() @ w[p + "wkv.weight"].t())[: n * r].view(n, r, -1)
    score = (x.float() @ w[p + "wgate.weight"].t())[: n * r].view(n, r, -1)
    pooled = (kv * torch.softmax(score, dim=1)).sum(1)
    return rms_norm(bf16(pooled), w[p + "norm.weight"], cfg["norm_eps"])


def index_keys(w, cfg, l, latent, cos, sin):
    p = f"layers.{l}.attn.indexer."
    r = cfg["compress_ratios"][l]
    k = rms_norm(bf16(latent @ w[p + "wk.weight"].t()), w[p + "k_norm.weight"], cfg["norm_eps"])
    n = latent.shape[0]
    return fp4_quant(rope(k, cos[0: n * r: r], sin[0: n * r: r]), 32, False)


def candidate_blocks(score, lens, topk_blocks, size):
    """The candidate source's pool (spec 7.4): per query, the best `topk_blocks` blocks of `size`
    positions by their best score, the block of the newest visible entry always kept; bool [t, n]."""
    t, n = score.shape
    blocks = -(-n // size)
    padded = torch.full((t, blocks * size), float("-inf"))
    padded[:, :n] = score
    best = padded.view(t, blocks, size).amax(-1)
    last = (lens - 1) // size
    pinned = last >= 0
    best[pinned, last[pinned]] = float("inf")
    keep = torch.zeros(t, blocks, dtype=torch.bool)
    top = torch.topk(best, min(topk_blocks, blocks), dim=-1)
    keep.scatter_(1, top.indices, top.values > float("-inf"))
    return keep.repeat_interleave(size, 1)[:, :n]


def indexer_topk(w, cfg, l, x, qr, keys, cos, sin, shared):
    """Top-k compressed entries of each query (spec 7.2-7.5), ascending, -1 where not visible."""
    p = f"layers.{l}.attn.indexer."
    r, t = cfg["compress_ratios"][l], x.shape[0]
    ih, ihd = cfg["index_n_heads"], cfg["index_head_dim"]
    q = fp4_quant(rope(linear_q(qr, w[p + "wq_b.weight"]).view(t, ih, ihd), cos, sin), 32, False)
    weights = bf16(bf16(x @ w[p + "weights_proj.weight"].t()) * (ihd ** -0.5 * ih ** -0.5))
    d = torch.relu(bf16(torch.einsum("thd,nd->thn", q, keys)))
    score = bf16(bf16(d * weights[:, :, None]).sum(1))  # [t, n]
    lens = (torch.arange(t) + 1) // r
    score = score.masked_fill(torch.arange(keys.shape[0])[None, :] >= lens[:, None], float("-inf"))
    if l == cfg.get("candidate_source_layer", -1):
        shared["candidates"] = candidate_blocks(score, lens, cfg["candidate_topk_blocks"], cfg["candidate_block_size"])
    elif 0 <= cfg.get("candidate_source_layer", -1) < l:
        score = score.masked_fill(~shared["candidates"], float("-inf"))
    k = min(cfg["index_topk"], t // r)
    sel = torch.topk(score, k, dim=-1).indices.sort(-1).values
    return torch.where(sel < lens[:, None], sel, -1)


def attention(w, cfg, l, x, cos, sin, shared):
    """Attention of one layer over a whole prompt (spec 5, 6, 7); `shared` carries the compressed KV
    and the top-k of the latest kv and index sources (spec 6.4)."""
    p = f"layers.{l}.attn."
    t, heads, hd = x.shape[0], cfg["n_heads"], cfg["head_dim"]
    r = cfg["compress_ratios"][l]
    qr = rms_norm(linear_q(x, w[p + "wq_a.weight"]), w[p + "q_norm.weight"], cfg["norm_eps"])
    q = rope(linear_q(qr, w[p + "wq_b.weight"]).view(t, heads, hd), cos, sin)
    kv = rms_norm(linear_q(x, w[p + "wkv.weight"]), w[p + "kv_norm.weight"], cfg["norm_eps"])
    kv = act_quant(rope(kv, cos, sin))
    idx = window_indices(t, cfg["window_size"])
    if r:
        if l in cfg["kv_source_layers"]:
            latent = compress(w, cfg, l, x)
            n = latent.shape[0]
            shared["keys"] = index_keys(w, cfg, l, latent, cos, sin)
            shared["kv"] = fp4_quant(rope(latent, cos[0: n * r: r], sin[0: n * r: r]), 16, True)
        if l in cfg["index_source_layers"]:
            shared["topk"] = indexer_topk(w, cfg, l, x, qr, shared["keys"], cos, sin, shared)
        kv = torch.cat([kv, shared["kv"]])
        idx = torch.cat([idx, torch.where(shared["topk"] >= 0, shared["topk"] + t, -1)], dim=1)
    o = sparse_attention(q, kv, idx, w[p + "attn_sink"], hd ** -0.5)
    o = rope(o, cos, sin, inverse=True)  # [t, heads, hd]
    groups = cfg["o_groups"]
    wa = bf16(w[p + "wo_a.weight"]).view(groups, -1, heads // groups * hd)
    z = bf16(torch.einsum("tgk,grk->tgr", o.reshape(t, groups, -1), wa)).flatten(1)
    return linear_q(z, w[p + "wo_b.weight"])


def moe(w, cfg, l, x):
    p = f"layers.{l}.ffn."
    z = x.float() @ w[p + "gate.weight"].t() / cfg["gate_temp"]
    s = torch.sqrt(F.softplus(z))
    k = cfg["n_activated_experts"]
    idx = torch.topk(s + w[p + "gate.bias"], k, dim=-1).indices
    wt = torch.gather(s, 1, idx)
    if cfg["norm_topk_prob"] and k > 1:
        wt = wt / (wt.sum(-1, keepdim=True) + 1e-20)
    wt = wt * cfg["route_scale"]
    limit = cfg["swiglu_limit"]

    def expert(prefix, xe, rw=None):
        g, u = linear_q(xe, w[prefix + "w1.weight"]), linear_q(xe, w[prefix + "w3.weight"])
        if limit:
            u, g = u.clamp(-limit, limit), g.clamp(max=limit)
        a = F.silu(g) * u
        if rw is not None:
            a = a * rw[:, None]
        return linear_q(bf16(a), w[prefix + "w2.weight"])

    y = torch.zeros_like(x, dtype=torch.float32)
    for e in range(cfg["n_routed_experts"]):
        rows, slot = (idx == e).nonzero(as_tuple=True)
        if rows.numel():
            y[rows] += expert(p + f"experts.{e}.", x[rows], wt[rows, slot])
    y += expert(p + "shared_experts.", x)
    return bf16(y), idx


def block(w, cfg, l, h, pre_in, cos, sin, shared):
    """One block (spec 4.3): h [t, hc, dim] bf16 values -> (h, f_pre, gate ids)."""
    p = f"layers.{l}."
    a_pre, a_post, a_comb = hc_mixes(h, w[p + "hc_attn_fn"], w[p + "hc_attn_scale"], w[p + "hc_attn_base"], cfg)
    x = rms_norm(hc_pre(h, pre_in), w[p + "attn_norm.weight"], cfg["norm_eps"])
    h = hc_post(attention(w, cfg, l, x, cos, sin, shared), h, a_post, a_comb)
    f_pre, f_post, f_comb = hc_mixes(h, w[p + "hc_ffn_fn"], w[p + "hc_ffn_scale"], w[p + "hc_ffn_base"], cfg)
    x = rms_norm(hc_pre(h, a_pre), w[p + "ffn_norm.weight"], cfg["norm_eps"])
    y, idx = moe(w, cfg, l, x)
    return hc_post(y, h, f_post, f_comb), f_pre, idx


def embed(w, cfg, ids):
    h = bf16(w["embed.weight"][ids])
    hc = cfg["hc_mult"]
    pre = torch.zeros(len(ids), hc)
    pre[:, 0] = 1
    return h[:, None, :].repeat(1, hc, 1), pre


def engram_hashes(ids, token_map, pad_id, multipliers, primes, offsets):
    """Hashed table rows of a prompt from position 0 (spec 9.5): int64 [t, layers, columns] for
    every Engram layer; multipliers [layers, max_ngram], primes [layers, orders, heads], offsets
    [layers, columns]. The products stay below 2^63 by the multipliers' construction."""
    c = token_map[ids].long()
    t = len(ids)
    layers, orders, heads = primes.shape
    out = torch.empty(t, layers, orders * heads, dtype=torch.int64)
    for li in range(layers):
        rolling = torch.zeros(t, dtype=torch.int64)
        for shift in range(orders + 1):
            v = torch.full((t,), pad_id, dtype=torch.int64)
            if shift < t:
                v[shift:] = c[: t - shift]  # the token `shift` back, the pad before the prompt's start
            rolling = rolling ^ (v * int(multipliers[li][shift]))
            if shift >= 1:
                cols = slice((shift - 1) * heads, shift * heads)
                out[:, li, cols] = rolling[:, None] % primes[li][shift - 1][None, :] + offsets[li][cols][None, :]
    return out


def engram(w, cfg, l, h, hashes):
    """h [t, hc, dim] + the layer's hashed rows [t, columns] -> h with the gated memory added (9.7)."""
    p = f"layers.{l}.engram."
    t, hc, dim = h.shape
    e = bf16(w[p + "embed.weight"][hashes])  # [t, columns, head_dim]
    kv = linear_q(e.flatten(1), w[p + "wkv.weight"])
    key, value = kv[:, : hc * dim].view(t, hc, dim), kv[:, hc * dim:]
    wgt = bf16(w[p + "q_weight"]) * bf16(w[p + "k_weight"])
    hf = h.float()
    eps = cfg["norm_eps"]
    rstd = torch.rsqrt(hf.pow(2).mean(-1) + eps) * torch.rsqrt(key.pow(2).mean(-1) + eps)
    dot = ((hf * wgt[None]) * key).sum(-1) * rstd * dim ** -0.5
    gate = torch.sigmoid(torch.copysign(torch.sqrt(dot.abs().clamp(min=1e-6)), dot))
    return bf16(hf + gate[:, :, None] * value[:, None, :])


def head_logits(w, cfg, h, pre):
    """The last block's stream collapsed with its FFN pre-mix, the final norm, the head (spec 2)."""
    x = rms_norm(hc_pre(h, pre), w["norm.weight"], cfg["norm_eps"])
    return x.float() @ bf16(w["head.weight"]).t()


def prefill(w, cfg, ids, hashes=None):
    """A whole prompt from position 0: every position's logits [t, vocab] (fp32)."""
    h, pre = embed(w, cfg, ids)
    engram_layers = cfg.get("engram_layer_ids", [])
    shared = {}
    for l in range(cfg["n_layers"]):
        if l in engram_layers:
            h = engram(w, cfg, l, h, hashes[:, engram_layers.index(l)])
        cos, sin = rope_table(cfg, l, len(ids))
        h, pre, _ = block(w, cfg, l, h, pre, cos, sin, shared)
    return head_logits(w, cfg, h, pre)
