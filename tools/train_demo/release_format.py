"""The official release's weight formats in PyTorch, for exporting the demo model (issue 23).

model-spec.md section 12.3: an fp8 linear weight is e4m3 codes with one e8m0 scale per 32 x 32
block; a routed expert's is e2m1 codes packed two a byte (low nibble: the even element) with one
e8m0 scale per 32 inputs of each output row; an Engram table's rows are e4m3 with one e8m0 scale
per 32 values. Every decoded value is exact in bf16. Quantisation picks the smallest power-of-two
scale that keeps a block's largest magnitude in range (as act_quant's ue8m0 does) and rounds each
value to the nearest code, ties to even; values the format holds (a block that is already a
decoded block) come back unchanged.

Safetensors are read and written here too (the F8_E4M3, F8_E8M0 and I8 tensors as bytes), so the
export needs nothing beyond PyTorch.
"""
import json
import math
import os
import struct

import torch

E4M3_MAX, E2M1_MAX = 448.0, 6.0


def _e4m3_values():
    """The value of each of the 256 e4m3 codes (NaN for 0x7F and 0xFF)."""
    out = []
    for code in range(256):
        sign = -1.0 if code & 0x80 else 1.0
        exp, man = (code >> 3) & 0xF, code & 7
        if exp == 15 and man == 7:
            out.append(float("nan"))
        elif exp == 0:
            out.append(sign * man / 8 * 2.0 ** -6)
        else:
            out.append(sign * (1 + man / 8) * 2.0 ** (exp - 7))
    return torch.tensor(out, dtype=torch.float32)


E4M3 = _e4m3_values()
E2M1 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0])


def _nearest_code(x, magnitudes):
    """Codes (indices into the ascending non-negative `magnitudes`) nearest to |x|, ties to the even
    code (the one whose last mantissa bit is 0: the even index)."""
    magnitudes = magnitudes.to(x.device)
    a = x.abs().clamp(max=float(magnitudes[-1]))
    hi = torch.searchsorted(magnitudes, a).clamp(max=len(magnitudes) - 1)
    lo = (hi - 1).clamp(min=0)
    d_lo, d_hi = a - magnitudes[lo], magnitudes[hi] - a
    pick_hi = (d_hi < d_lo) | ((d_hi == d_lo) & (hi % 2 == 0))
    return torch.where(pick_hi, hi, lo)


def e4m3_encode(x):
    """Codes of the e4m3 values nearest to x (|x| <= 448), ties to even, as uint8."""
    magnitudes = E4M3[:127]  # 0x00 .. 0x7E, ascending
    code = _nearest_code(x, magnitudes)
    return (code | (torch.signbit(x).to(torch.int64) << 7)).to(torch.uint8)


def e4m3_decode(codes):
    return E4M3.to(codes.device)[codes.to(torch.int64)]


def e2m1_encode(x):
    """Codes (0..15) of the e2m1 values nearest to x (|x| <= 6), ties to even, as uint8."""
    code = _nearest_code(x, E2M1[:8])
    return (code | (torch.signbit(x).to(torch.int64) << 3)).to(torch.uint8)


def e2m1_decode(codes):
    return E2M1.to(codes.device)[codes.to(torch.int64)]


def e8m0_scale(amax, largest):
    """The e8m0 byte of the smallest power of two s with amax / s <= largest: 2^ceil(log2(r)) for
    r = max(amax, 1e-4) * (1 / largest) in fp32, as act_quant's ue8m0 scale."""
    ratio = amax.float().clamp(min=1e-4) * (1.0 / largest)
    m, e = torch.frexp(ratio)  # ratio = m * 2^e, 0.5 <= m < 1: ceil(log2) is e, or e - 1 at m = 0.5
    e = torch.where(m == 0.5, e - 1, e).to(torch.int64)
    return (e + 127).clamp(0, 254).to(torch.uint8)


def _scale_value(byte):
    return torch.pow(2.0, byte.to(torch.float64) - 127).to(torch.float32)


def quantize_fp8_blocks(w):
    """w [n, k] -> (e4m3 codes [n, k], e8m0 scales [ceil(n/32), ceil(k/32)])."""
    n, k = w.shape
    bn, bk = math.ceil(n / 32), math.ceil(k / 32)
    padded = torch.zeros(bn * 32, bk * 32, dtype=torch.float32, device=w.device)
    padded[:n, :k] = w.float()
    blocks = padded.view(bn, 32, bk, 32)
    scales = e8m0_scale(blocks.abs().amax(dim=(1, 3)), E4M3_MAX)
    s = _scale_value(scales)[:, None, :, None]
    codes = e4m3_encode((blocks / s).clamp(-E4M3_MAX, E4M3_MAX)).view(bn * 32, bk * 32)[:n, :k]
    return codes.contiguous(), scales


def dequantize_fp8_blocks(codes, scales):
    n, k = codes.shape
    s = _scale_value(scales).repeat_interleave(32, 0)[:n].repeat_interleave(32, 1)[:, :k]
    return e4m3_decode(codes) * s


def quantize_fp4_rows(w):
    """w [n, k] (k a multiple of 32) -> (packed e2m1 [n, k/2] as uint8, e8m0 scales [n, k/32])."""
    n, k = w.shape
    groups = w.float().view(n, k // 32, 32)
    scales = e8m0_scale(groups.abs().amax(dim=2), E2M1_MAX)
    codes = e2m1_encode((groups / _scale_value(scales)[:, :, None]).clamp(-E2M1_MAX, E2M1_MAX)).view(n, k)
    packed = codes[:, 0::2] | (codes[:, 1::2] << 4)
    return packed.contiguous(), scales


def dequantize_fp4_rows(packed, scales):
    n, half = packed.shape
    codes = torch.empty(n, 2 * half, dtype=torch.uint8, device=packed.device)
    codes[:, 0::2], codes[:, 1::2] = packed & 0xF, packed >> 4
    return e2m1_decode(codes) * _scale_value(scales).repeat_interleave(32, 1)


def quantize_rows_fp8(t):
    """An Engram table [rows, d] (d a multiple of 32) -> (e4m3 codes [rows, d], e8m0 [rows, d/32])."""
    rows, d = t.shape
    groups = t.float().view(rows, d // 32, 32)
    scales = e8m0_scale(groups.abs().amax(dim=2), E4M3_MAX)
    codes = e4m3_encode((groups / _scale_value(scales)[:, :, None]).clamp(-E4M3_MAX, E4M3_MAX)).view(rows, d)
    return codes.contiguous(), scales


def dequantize_rows_fp8(codes, scales):
    return e4m3_decode(codes) * _scale_value(scales).repeat_interleave(32, 1)


# Safetensors: names -> (dtype string, tensor). Byte dtypes (F8_E4M3, F8_E8M0, I8) travel as uint8.
_TORCH = {"BF16": torch.bfloat16, "F32": torch.float32, "F16": torch.float16, "I32": torch.int32,
          "I64": torch.int64, "F8_E4M3": torch.uint8, "F8_E8M0": torch.uint8, "I8": torch.uint8, "U8": torch.uint8}


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        start, end = e["data_offsets"]
        raw = bytearray(data[8 + n + start:8 + n + end])
        t = torch.frombuffer(raw, dtype=_TORCH[e["dtype"]]) if raw else torch.empty(0, dtype=_TORCH[e["dtype"]])
        out[name] = (e["dtype"], t.reshape(e["shape"]))
    return out


def checkpoint_shards(folder):
    """The weight shards of a checkpoint folder: those model.safetensors.index.json lists (other
    safetensors files, such as the Engram token map, are not weights)."""
    with open(os.path.join(folder, "model.safetensors.index.json")) as f:
        return sorted(set(json.load(f)["weight_map"].values()))


def read_checkpoint(folder):
    """Every weight of a checkpoint folder."""
    out = {}
    for name in checkpoint_shards(folder):
        out.update(read_safetensors(os.path.join(folder, name)))
    return out


def _write_shard(path, tensors, names):
    header, blobs, offset = {}, [], 0
    for name in names:
        dtype, t = tensors[name]
        b = t.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes() if t.numel() else b""
        header[name] = {"dtype": dtype, "shape": list(t.shape), "data_offsets": [offset, offset + len(b)]}
        blobs.append(b)
        offset += len(b)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for b in blobs:
            f.write(b)
    return offset


def write_checkpoint(folder, tensors, shard_bytes=None):
    """Shards model-0000i-of-0000n.safetensors (tensors in name order, a new shard once one holds
    shard_bytes; one shard without it) and model.safetensors.index.json."""
    os.makedirs(folder, exist_ok=True)
    shards, size = [[]], 0
    for name in sorted(tensors):
        bytes_ = tensors[name][1].numel() * tensors[name][1].element_size()
        if shard_bytes and shards[-1] and size + bytes_ > shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append(name)
        size += bytes_
    weight_map, total = {}, 0
    for i, names in enumerate(shards):
        shard = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        total += _write_shard(os.path.join(folder, shard), tensors, names)
        weight_map.update({n: shard for n in names})
    with open(os.path.join(folder, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=1)
