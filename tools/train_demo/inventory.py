"""The release's tensors of a config: every name with its shape and how the release stores it
(model-spec.md section 12.2; the same inventory as the engine's weight manifest): fp8 blocks for the
linear layers, packed fp4 rows for the routed experts, e4m3 rows for the Engram tables, bf16 for the
embedding, head, norms and small projections, fp32 for the hyper-connections, sinks and biases."""


def _block(cfg, p, layer, experts):
    dim, hc, heads, hd = cfg["dim"], cfg["hc_mult"], cfg["n_heads"], cfg["head_dim"]
    q_lora, groups, o_lora = cfg["q_lora_rank"], cfg["o_groups"], cfg["o_lora_rank"]
    inter, mix = cfg["moe_inter_dim"], (2 + hc) * hc
    t = {}
    for part in ("attn", "ffn"):
        t[f"{p}hc_{part}_fn"] = ([mix, hc * dim], "f32")
        t[f"{p}hc_{part}_base"] = ([mix], "f32")
        t[f"{p}hc_{part}_scale"] = ([3], "f32")
        t[f"{p}{part}_norm.weight"] = ([dim], "bf16")
    a = p + "attn."
    t[a + "attn_sink"] = ([heads], "f32")
    t[a + "wq_a.weight"] = ([q_lora, dim], "fp8_blocks")
    t[a + "q_norm.weight"] = ([q_lora], "bf16")
    t[a + "wq_b.weight"] = ([heads * hd, q_lora], "fp8_blocks")
    t[a + "wkv.weight"] = ([hd, dim], "fp8_blocks")
    t[a + "kv_norm.weight"] = ([hd], "bf16")
    t[a + "wo_a.weight"] = ([groups * o_lora, heads // groups * hd], "fp8_blocks")
    t[a + "wo_b.weight"] = ([dim, groups * o_lora], "fp8_blocks")
    if layer is not None and layer < cfg["n_layers"]:
        ratio = cfg["compress_ratios"][layer]
        ih, ihd = cfg["index_n_heads"], cfg["index_head_dim"]
        if layer in cfg["kv_source_layers"]:
            c = a + "compressor."
            t[c + "wkv.weight"] = ([hd, dim], "bf16")
            if ratio > 1:
                t[c + "wgate.weight"] = ([hd, dim], "bf16")
            t[c + "norm.weight"] = ([hd], "bf16")
            t[a + "indexer.wk.weight"] = ([ihd, hd], "bf16")
            t[a + "indexer.k_norm.weight"] = ([ihd], "bf16")
        if layer in cfg["index_source_layers"]:
            t[a + "indexer.wq_b.weight"] = ([ih * ihd, q_lora], "fp8_blocks")
            t[a + "indexer.weights_proj.weight"] = ([ih, dim], "bf16")
    f = p + "ffn."
    t[f + "gate.weight"] = ([experts, dim], "bf16")
    t[f + "gate.bias"] = ([experts], "f32")
    for e in range(experts):
        t[f + f"experts.{e}.w1.weight"] = ([inter, dim], "fp4_rows")
        t[f + f"experts.{e}.w3.weight"] = ([inter, dim], "fp4_rows")
        t[f + f"experts.{e}.w2.weight"] = ([dim, inter], "fp4_rows")
    for name, shape in (("w1", [inter, dim]), ("w3", [inter, dim]), ("w2", [dim, inter])):
        t[f + f"shared_experts.{name}.weight"] = (shape, "fp8_blocks")
    return t


def tensors(cfg):
    """{name: (shape, format)} of every tensor a checkpoint of `cfg` holds."""
    dim, vocab, hc = cfg["dim"], cfg["vocab_size"], cfg["hc_mult"]
    t = {"embed.weight": ([vocab, dim], "bf16"), "head.weight": ([vocab, dim], "bf16"),
         "norm.weight": ([dim], "bf16")}
    engram = cfg.get("engram_layer_ids", [])
    columns = (cfg.get("engram_max_ngram_size", 1) - 1) * cfg.get("engram_n_heads", 0)
    for layer in range(cfg["n_layers"]):
        t.update(_block(cfg, f"layers.{layer}.", layer, cfg["n_routed_experts"]))
        if layer in engram:
            e = f"layers.{layer}.engram."
            rows = cfg["engram_num_embeddings"][engram.index(layer)]
            t[e + "embed.weight"] = ([rows, cfg["engram_head_dim"]], "fp8_rows")
            t[e + "wkv.weight"] = ([(hc + 1) * dim, columns * cfg["engram_head_dim"]], "fp8_blocks")
            t[e + "q_weight"] = ([hc, dim], "bf16")
            t[e + "k_weight"] = ([hc, dim], "bf16")
    stages = cfg.get("n_mtp_layers", 0)
    for i in range(stages):
        t.update(_block(cfg, f"mtp.{i}.", cfg["n_layers"] + i, cfg["dspark_n_routed_experts"]))
    if stages:
        taps, rank, last = len(cfg["dspark_target_layer_ids"]), cfg["dspark_markov_rank"], f"mtp.{stages - 1}."
        t["mtp.0.main_proj.weight"] = ([dim, taps * dim], "fp8_blocks")
        t["mtp.0.main_norm.weight"] = ([dim], "bf16")
        t[last + "norm.weight"] = ([dim], "bf16")
        t[last + "markov_head.embed.weight"] = ([vocab, rank], "bf16")
        t[last + "markov_head.head.weight"] = ([vocab, rank], "bf16")
        t[last + "confidence_head.proj.weight"] = ([1, dim + rank], "bf16")
    return t
