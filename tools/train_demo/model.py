"""The V4.1 model in PyTorch, for training the demo model (issue 23): prompts of equal length from
position 0 through the hyper-connections with Sinkhorn, the window attention with its sink, the
compressor at ratios 1 and 2 with the compressed KV, the two-level indexer, the MoE, Engram and the
head, and the DSpark drafter teacher-forced at every anchor of those prompts, with the reference's
rounding points (bf16 casts, act_quant, the fp4 fake quantisation of the compressed KV and the
indexer), each trained as the identity (straight-through) when the weights are TrainableWeights.
Not here: decode steps (prefill alone trains the model). check_model.py and check_dspark.py check
it against the golden fixtures.
"""
import math

import torch
import torch.nn.functional as F

import release_format as rf


def gather_rows(table, idx):
    """table[idx] (rows of a 2-D table), by index_select: its gradient is an index_add, where
    advanced indexing's sorts the indices."""
    return table.index_select(0, idx.flatten()).view(*idx.shape, table.shape[-1])


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


_ROPE_TABLES = {}


def rope_table(cfg, layer, n, device="cpu"):
    """cos, sin [n, rope_head_dim / 2] of a layer's positions 0 .. n - 1 (spec 3.2), made once."""
    ratio = cfg["compress_ratios"][layer]
    fields = ("compress_rope_theta", "rope_theta", "rope_head_dim", "original_seq_len", "rope_factor", "beta_fast",
              "beta_slow")
    key = (ratio > 0, n, str(device)) + tuple(cfg.get(k) for k in fields)
    if key not in _ROPE_TABLES:
        _ROPE_TABLES[key] = _rope_table(cfg, layer, n, device)
    return _ROPE_TABLES[key]


def _rope_table(cfg, layer, n, device):
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
    return torch.cos(angle).to(device), torch.sin(angle).to(device)


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
        self.quantised = {}

    @staticmethod
    def _quantise(x, kind):
        if kind == "fp8_blocks":
            return rf.dequantize_fp8_blocks(*rf.quantize_fp8_blocks(x))
        if kind == "fp8_rows":
            return rf.dequantize_rows_fp8(*rf.quantize_rows_fp8(x))
        if kind == "fp4_rows":
            return rf.dequantize_fp4_rows(*rf.quantize_fp4_rows(x))
        if kind == "bf16":
            return x.to(torch.bfloat16).float()
        return x

    def refresh(self):
        """Quantises every weight once (until the next refresh) in a few large calls: the tensors of
        one format and shape stacked (their blocks and rows do not straddle tensors when the rows
        are a multiple of 32), as each would be alone. For training, where every step reads each
        weight once or more."""
        groups = {}
        for name in self.names:
            x = self.params[self.index[name]]
            groups.setdefault((self.formats[name], tuple(x.shape)), []).append(name)
        self.quantised = {}
        with torch.no_grad():
            for (kind, shape), names in groups.items():
                if kind == "fp8_blocks" and shape[0] % 32:
                    for n in names:
                        self.quantised[n] = self._quantise(self.params[self.index[n]].detach(), kind)
                    continue
                stacked = torch.stack([self.params[self.index[n]].detach() for n in names])
                flat = stacked.reshape(-1, shape[-1]) if len(shape) == 2 else stacked
                q = self._quantise(flat, kind).view(stacked.shape)
                for n, qn in zip(names, q.unbind(0)):
                    self.quantised[n] = qn

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
        q = self.quantised.get(name)
        if q is None:
            with torch.no_grad():
                q = self._quantise(x, self.formats[name])
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
    rows = gather_rows(kv, idx.clamp(min=0))  # [t, slots, d]
    scores = torch.einsum("thd,tld->thl", q, rows) * scale
    scores = scores.masked_fill((idx < 0)[:, None, :], float("-inf"))
    mx = scores.amax(-1, keepdim=True)  # the running max of the scores alone; the sink only divides
    e = torch.exp(scores - mx)
    o = torch.einsum("thl,tld->thd", bf16(e), rows) / (e.sum(-1, keepdim=True) + torch.exp(sink[None, :, None] - mx))
    return bf16(o)


def window_indices(t, window, device="cpu"):
    """Prefill: query p's window rows max(p - window + 1, 0) + j, those past p as -1 (spec 5.2)."""
    width = min(t, window)
    p = torch.arange(t, device=device)[:, None]
    rows = (p - window + 1).clamp(min=0) + torch.arange(width, device=device)[None, :]
    return torch.where(rows <= p, rows, -1)


def compress(w, cfg, l, x):
    """The kv source's pre-RoPE latents of each prompt's complete groups (spec 6.1): x [b, t, dim]
    -> [b, n, head_dim]."""
    p = f"layers.{l}.attn.compressor."
    r = cfg["compress_ratios"][l]
    if r == 1:
        return rms_norm(bf16(x @ w[p + "wkv.weight"].t()), w[p + "norm.weight"], cfg["norm_eps"])
    b, n = x.shape[0], x.shape[1] // r
    kv = (x.float() @ w[p + "wkv.weight"].t())[:, : n * r].view(b, n, r, -1)
    score = (x.float() @ w[p + "wgate.weight"].t())[:, : n * r].view(b, n, r, -1)
    pooled = (kv * torch.softmax(score, dim=2)).sum(2)
    return rms_norm(bf16(pooled), w[p + "norm.weight"], cfg["norm_eps"])


def group_rope(x, cos, sin, r):
    """RoPE of compressed entries [b, n, d] at their groups' first positions (n * r <= t)."""
    b, n = x.shape[0], x.shape[1]
    return rope(x.flatten(0, 1), cos[0: n * r: r].repeat(b, 1), sin[0: n * r: r].repeat(b, 1)).view(x.shape)


def index_keys(w, cfg, l, latent, cos, sin):
    """latent [b, n, head_dim] -> the index keys [b, n, index_head_dim] (spec 7.1)."""
    p = f"layers.{l}.attn.indexer."
    k = rms_norm(bf16(latent @ w[p + "wk.weight"].t()), w[p + "k_norm.weight"], cfg["norm_eps"])
    return fp4_quant(group_rope(k, cos, sin, cfg["compress_ratios"][l]), 32, False)


def candidate_blocks(score, lens, topk_blocks, size):
    """The candidate source's pool (spec 7.4): per query, the best `topk_blocks` blocks of `size`
    positions by their best score, the block of the newest visible entry always kept; score
    [b, t, n] -> bool [b, t, n]."""
    b, t, n = score.shape
    blocks = -(-n // size)
    padded = torch.full((b, t, blocks * size), float("-inf"), device=score.device)
    padded[..., :n] = score
    best = padded.view(b, t, blocks, size).amax(-1)
    last = (lens - 1) // size
    pinned = last >= 0
    best[:, pinned, last[pinned]] = float("inf")
    keep = torch.zeros(b, t, blocks, dtype=torch.bool, device=score.device)
    top = torch.topk(best, min(topk_blocks, blocks), dim=-1)
    keep.scatter_(2, top.indices, top.values > float("-inf"))
    return keep.repeat_interleave(size, 2)[..., :n]


def indexer_topk(w, cfg, l, x, qr, keys, cos, sin, shared):
    """Top-k compressed entries of each query (spec 7.2-7.5), ascending, -1 where not visible:
    x [b * t, dim], qr [b * t, q_lora], keys [b, n, index_head_dim], cos/sin [b * t, rope/2]
    -> [b, t, k]."""
    p = f"layers.{l}.attn.indexer."
    b, r = keys.shape[0], cfg["compress_ratios"][l]
    t = x.shape[0] // b
    ih, ihd = cfg["index_n_heads"], cfg["index_head_dim"]
    q = fp4_quant(rope(linear_q(qr, w[p + "wq_b.weight"]).view(b * t, ih, ihd), cos, sin), 32, False)
    weights = bf16(bf16(x @ w[p + "weights_proj.weight"].t()) * (ihd ** -0.5 * ih ** -0.5)).view(b, t, ih)
    d = torch.relu(bf16(torch.einsum("bthd,bnd->bthn", q.view(b, t, ih, ihd), keys)))
    score = bf16(bf16(d * weights[..., None]).sum(2))  # [b, t, n]
    lens = (torch.arange(t, device=x.device) + 1) // r
    visible = torch.arange(keys.shape[1], device=x.device)[None, :] < lens[:, None]
    score = score.masked_fill(~visible, float("-inf"))
    if l == cfg.get("candidate_source_layer", -1):
        shared["candidates"] = candidate_blocks(score, lens, cfg["candidate_topk_blocks"], cfg["candidate_block_size"])
    elif 0 <= cfg.get("candidate_source_layer", -1) < l:
        score = score.masked_fill(~shared["candidates"], float("-inf"))
    k = min(cfg["index_topk"], t // r)
    sel = torch.topk(score, k, dim=-1).indices.sort(-1).values
    return torch.where(sel < lens[:, None], sel, -1)


def query_and_kv(w, cfg, p, x, cos, sin):
    """A layer's queries [tokens, heads, head_dim] (and q_lora's normed input) and its own KV rows
    [tokens, head_dim] (spec 5.1), RoPE'd at cos/sin's positions."""
    heads, hd = cfg["n_heads"], cfg["head_dim"]
    qr = rms_norm(linear_q(x, w[p + "wq_a.weight"]), w[p + "q_norm.weight"], cfg["norm_eps"])
    q = rope(linear_q(qr, w[p + "wq_b.weight"]).view(x.shape[0], heads, hd), cos, sin)
    kv = rms_norm(linear_q(x, w[p + "wkv.weight"]), w[p + "kv_norm.weight"], cfg["norm_eps"])
    return q, qr, act_quant(rope(kv, cos, sin))


def output_projection(w, cfg, p, o, cos, sin):
    """Attention outputs [tokens, heads, head_dim]: inverse RoPE, wo_a by groups, wo_b (spec 5.1)."""
    heads, hd, groups = cfg["n_heads"], cfg["head_dim"], cfg["o_groups"]
    o = rope(o, cos, sin, inverse=True)
    wa = bf16(w[p + "wo_a.weight"]).view(groups, -1, heads // groups * hd)
    z = bf16(torch.einsum("tgk,grk->tgr", o.reshape(o.shape[0], groups, -1), wa)).flatten(1)
    return linear_q(z, w[p + "wo_b.weight"])


def flat_rows(kv, idx):
    """Per-prompt rows kv [b, n, d] and indices idx [b, t, slots] (-1: none) as one table
    [b * n, d] and indices [b * t, slots] into it, for sparse_attention."""
    b, n = kv.shape[0], kv.shape[1]
    offset = (torch.arange(b, device=kv.device) * n)[:, None, None]
    return kv.flatten(0, 1), torch.where(idx >= 0, idx + offset, -1).flatten(0, 1)


def attention(w, cfg, l, x, cos, sin, shared, batch=1):
    """Attention of one layer over `batch` whole prompts of equal length, x [batch * t, dim] and
    cos/sin [t, rope/2] (spec 5, 6, 7); `shared` carries the compressed KV and the top-k of the
    latest kv and index sources (spec 6.4)."""
    p = f"layers.{l}.attn."
    t = x.shape[0] // batch
    r = cfg["compress_ratios"][l]
    cos_b, sin_b = cos.repeat(batch, 1), sin.repeat(batch, 1)
    q, qr, kv = query_and_kv(w, cfg, p, x, cos_b, sin_b)
    kv = kv.view(batch, t, -1)
    idx = window_indices(t, cfg["window_size"], x.device).expand(batch, -1, -1)
    if r:
        if l in cfg["kv_source_layers"]:
            latent = compress(w, cfg, l, x.view(batch, t, -1))
            shared["keys"] = index_keys(w, cfg, l, latent, cos, sin)
            shared["kv"] = fp4_quant(group_rope(latent, cos, sin, r), 16, True)
        if l in cfg["index_source_layers"]:
            shared["topk"] = indexer_topk(w, cfg, l, x, qr, shared["keys"], cos_b, sin_b, shared)
        kv = torch.cat([kv, shared["kv"]], dim=1)
        idx = torch.cat([idx, torch.where(shared["topk"] >= 0, shared["topk"] + t, -1)], dim=2)
    o = sparse_attention(q, *flat_rows(kv, idx), w[p + "attn_sink"], cfg["head_dim"] ** -0.5)
    return output_projection(w, cfg, p, o, cos_b, sin_b)


# Training on a GPU: every routed expert on every token, weighted 0 where not routed (the same
# values up to the order of the fp32 adds, in a few large launches and no host reads).
DENSE_EXPERTS = False


def dense_experts(w, cfg, p, x, idx, wt):
    n_exp, limit = cfg["n_routed_experts"], cfg["swiglu_limit"]
    w1, w2, w3 = (torch.stack([w[p + f"experts.{e}.{m}.weight"] for e in range(n_exp)]) for m in ("w1", "w2", "w3"))
    xq = act_quant(x)
    g, u = bf16(torch.einsum("nd,eid->eni", xq, w1)), bf16(torch.einsum("nd,eid->eni", xq, w3))
    if limit:
        u, g = u.clamp(-limit, limit), g.clamp(max=limit)
    routed = torch.zeros(x.shape[0], n_exp, device=x.device).scatter(1, idx, wt)  # [tokens, experts]
    a = F.silu(g) * u * routed.t()[:, :, None]
    return bf16(torch.einsum("eni,edi->end", act_quant(bf16(a)), w2)).sum(0)


def moe(w, cfg, block_prefix, x):
    p = block_prefix + "ffn."
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

    if DENSE_EXPERTS:
        return bf16(dense_experts(w, cfg, p, x, idx, wt) + expert(p + "shared_experts.", x)), idx
    y = torch.zeros_like(x, dtype=torch.float32)
    for e in range(cfg["n_routed_experts"]):
        rows, slot = (idx == e).nonzero(as_tuple=True)
        if rows.numel():
            y[rows] += expert(p + f"experts.{e}.", x[rows], wt[rows, slot])
    y += expert(p + "shared_experts.", x)
    return bf16(y), idx


def block(w, cfg, l, h, pre_in, cos, sin, shared, batch=1):
    """One backbone block (spec 4.3): h [batch * t, hc, dim] bf16 values -> (h, f_pre, gate ids)."""
    return block_with(w, cfg, f"layers.{l}.", h, pre_in, lambda x: attention(w, cfg, l, x, cos, sin, shared, batch))


def block_with(w, cfg, p, h, pre_in, attend):
    """A block of the weights under prefix p with the attention `attend` (x -> its output)."""
    a_pre, a_post, a_comb = hc_mixes(h, w[p + "hc_attn_fn"], w[p + "hc_attn_scale"], w[p + "hc_attn_base"], cfg)
    x = rms_norm(hc_pre(h, pre_in), w[p + "attn_norm.weight"], cfg["norm_eps"])
    h = hc_post(attend(x), h, a_post, a_comb)
    f_pre, f_post, f_comb = hc_mixes(h, w[p + "hc_ffn_fn"], w[p + "hc_ffn_scale"], w[p + "hc_ffn_base"], cfg)
    x = rms_norm(hc_pre(h, a_pre), w[p + "ffn_norm.weight"], cfg["norm_eps"])
    y, idx = moe(w, cfg, p, x)
    return hc_post(y, h, f_post, f_comb), f_pre, idx


def embed(w, cfg, ids):
    h = bf16(gather_rows(w["embed.weight"], ids))
    hc = cfg["hc_mult"]
    pre = torch.zeros(len(ids), hc, device=ids.device)
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
    e = bf16(gather_rows(w[p + "embed.weight"], hashes))  # [t, columns, head_dim]
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


def prefill(w, cfg, ids, hashes=None, taps=None):
    """Whole prompts from position 0, ids [t] or [b, t] (and their Engram hashes [(b,) t, layers,
    columns]): every position's logits [(b,) t, vocab] (fp32). With a list `taps`, also appends
    DSpark's main hidden states [b * t, taps * dim] (spec 10.2: the mean of the stream's copies at
    each tap layer's input, after its Engram)."""
    single = ids.dim() == 1
    if single:
        ids, hashes = ids[None], (hashes[None] if hashes is not None else None)
    batch, t = ids.shape
    h, pre = embed(w, cfg, ids.flatten())
    engram_layers = cfg.get("engram_layer_ids", [])
    tap_layers = cfg.get("dspark_target_layer_ids", [])
    shared, hidden = {}, []
    for l in range(cfg["n_layers"]):
        if l in engram_layers:
            h = engram(w, cfg, l, h, hashes[:, :, engram_layers.index(l)].flatten(0, 1))
        if taps is not None and l in tap_layers:
            hidden.append(bf16(h.float().mean(1)))
        cos, sin = rope_table(cfg, l, t, ids.device)
        h, pre, _ = block(w, cfg, l, h, pre, cos, sin, shared, batch)
    if taps is not None:
        taps.append(torch.cat(hidden, dim=-1))
    logits = head_logits(w, cfg, h, pre)
    return logits if single else logits.view(batch, t, -1)


def stage_config(cfg):
    """The draft stages' config: their own expert count and top-k (spec 10.1)."""
    return dict(cfg, n_routed_experts=cfg["dspark_n_routed_experts"],
                n_activated_experts=cfg["dspark_n_activated_experts"])


def draft(w, cfg, main_hidden, ids, anchors, markov):
    """DSpark's drafts, teacher-forced (spec 10.2-10.4), for `batch` prompts of t tokens: the
    target's main hidden states main_hidden [b * t, taps * dim] of positions 0 .. t - 1, the
    anchor positions p (ascending, < t - 1) and each block's Markov tokens markov [b, anchors, B]
    (row 0: the anchor ids[p + 1]; row j: the token out[j] the Markov head conditions on). The
    block of p is the draft call after the target's forward at p: its rows sit at p + 1 .. p + B
    (the anchor, then noise), see the block and the stage's ring of main KV at positions
    max(p - window + 1, 0) .. p. Returns base [b, anchors, B, vocab] (Markov bias in) and the
    confidence [b, anchors, B]."""
    b, t = ids.shape
    nb, size, eps = len(anchors), cfg["dspark_block_size"], cfg["norm_eps"]
    scfg = stage_config(cfg)
    main_x = rms_norm(linear_q(main_hidden, w["mtp.0.main_proj.weight"]), w["mtp.0.main_norm.weight"], eps)
    tokens = torch.full((b, nb, size), cfg["dspark_noise_token_id"], dtype=torch.long, device=ids.device)
    tokens[:, :, 0] = markov[:, :, 0]
    h, pre = embed(w, cfg, tokens.flatten())
    rows = nb * size
    ring = window_indices(t, cfg["window_size"], ids.device)[anchors]  # [anchors, width]
    own = t + torch.arange(rows, device=ids.device).view(nb, 1, size).expand(nb, size, size)
    idx = torch.cat([ring[:, None, :].expand(nb, size, -1), own], dim=-1).reshape(1, rows, -1).expand(b, -1, -1)
    block_pos = (anchors[:, None] + 1 + torch.arange(size, device=ids.device)[None, :]).flatten()
    for i in range(cfg["n_mtp_layers"]):
        p = f"mtp.{i}."
        cos, sin = rope_table(cfg, cfg["n_layers"] + i, t + size + 1, ids.device)
        kv_main = rms_norm(linear_q(main_x, w[p + "attn.wkv.weight"]), w[p + "attn.kv_norm.weight"], eps)
        kv_main = act_quant(rope(kv_main, cos[:t].repeat(b, 1), sin[:t].repeat(b, 1))).view(b, t, -1)
        cos_q, sin_q = cos[block_pos].repeat(b, 1), sin[block_pos].repeat(b, 1)

        def attend(x, p=p, kv_main=kv_main, cos_q=cos_q, sin_q=sin_q):
            q, _, kv = query_and_kv(w, cfg, p + "attn.", x, cos_q, sin_q)
            table = torch.cat([kv_main, kv.view(b, rows, -1)], dim=1)
            o = sparse_attention(q, *flat_rows(table, idx), w[p + "attn.attn_sink"], cfg["head_dim"] ** -0.5)
            return output_projection(w, cfg, p + "attn.", o, cos_q, sin_q)

        h, pre, _ = block_with(w, scfg, p, h, pre, attend)
    last = f"mtp.{cfg['n_mtp_layers'] - 1}."
    x = hc_pre(h, pre)
    base = rms_norm(x, w[last + "norm.weight"], eps).float() @ bf16(w["head.weight"]).t()
    e = bf16(gather_rows(w[last + "markov_head.embed.weight"], markov.flatten()))
    base = base + e.float() @ bf16(w[last + "markov_head.head.weight"]).float().t()
    confidence = torch.cat([x, e], dim=-1).float() @ bf16(w[last + "confidence_head.proj.weight"]).t()
    return base.view(b, nb, size, -1), confidence.view(b, nb, size)
