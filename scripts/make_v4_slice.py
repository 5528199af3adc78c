#!/usr/bin/env python3
"""Write a sparse DeepSeek-V4 checkpoint (official release layout, bf16 weights) for a config.

    scripts/make_v4_slice.py --out DIR [--layers N] [--hash-layers K] [--ratios R,R,...]
    scripts/make_v4_slice.py --out DIR --config CONFIG.json [--layers N]

Without --config: a full-width slice of DeepSeek-V4-Flash (architecture spec section 1.3 / 7: hidden 4096,
64 heads x 512, q_lora 1024, 8 output groups x 1024, 256 experts x 2048 top-6, 64 index heads x 128,
vocab 129280, hc_mult 4, window 128) with N backbone layers (default 3), no MTP stages and no quantization
(bf16 weights, like the tiny fixtures). The slice's schedule is the release's with its two leading
sliding-window layers folded into one, so that a short slice holds every layer kind: N = 3 gives
layer 0 sliding window (hash-routed MoE), 1 CSA (ratio 4, indexer), 2 HCA (ratio 128). --ratios replaces the
schedule, --hash-layers (default 1) the number of hash-routed layers at the start.

With --config: the given flat official config (its compress_ratios / num_hash_layers); --layers N cuts it
to its first N layers.

Writes DIR/config.json, DIR/model.safetensors (a real safetensors header naming every tensor the config
implies, with its dtype and shape; the data region is a hole: no bytes are written) and
DIR/model.safetensors.index.json. Storage, as in the tiny fixtures (tests/golden/make_v4_fixtures.py): 2-D
`.weight` matrices (linears, embed, head, gate, experts) BF16; norms, hyper-connection fn/base/scale,
attn_sink, compressor ape and gate.bias F32; tid2eid I64. Tensors are laid out in the order safetensors'
writer uses (larger element size first, then by name), so the header of a real file of the same model is
reproduced exactly. Python standard library only.
"""
import argparse
import json
import os
import struct
import sys

# DeepSeek-V4-Flash (flat official config, spec section 1.3) without the quantization (bf16 weights) and
# without the MTP / DSpark stages: the slice is the backbone only.
V4_FLASH = {
    "architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v4", "torch_dtype": "bfloat16",
    "bos_token_id": 0, "eos_token_id": 1, "vocab_size": 129280,
    "hidden_size": 4096, "num_hidden_layers": 43, "num_attention_heads": 64, "num_key_value_heads": 1,
    "head_dim": 512, "qk_rope_head_dim": 64, "q_lora_rank": 1024, "o_groups": 8, "o_lora_rank": 1024,
    "hidden_act": "silu", "swiglu_limit": 10.0, "rms_norm_eps": 1e-6, "tie_word_embeddings": False,
    "use_cache": True, "max_position_embeddings": 1048576, "rope_theta": 10000.0,
    "compress_rope_theta": 160000.0,
    "rope_scaling": {"type": "yarn", "factor": 16.0, "beta_fast": 32.0, "beta_slow": 1.0,
                     "original_max_position_embeddings": 65536},
    "n_routed_experts": 256, "n_shared_experts": 1, "num_experts_per_tok": 6, "moe_intermediate_size": 2048,
    "scoring_func": "sqrtsoftplus", "topk_method": "noaux_tc", "norm_topk_prob": True,
    "routed_scaling_factor": 1.5, "num_hash_layers": 3, "sliding_window": 128,
    "compress_ratios": [0, 0] + [4, 128] * 20 + [4],
    "index_n_heads": 64, "index_head_dim": 128, "index_topk": 512,
    "hc_mult": 4, "hc_sinkhorn_iters": 20, "hc_eps": 1e-6, "num_nextn_predict_layers": 0,
}

ELEMENT_SIZE = {"I64": 8, "F32": 4, "BF16": 2}


class Failure(Exception):
    pass


def flash_slice(layers, hash_layers, ratios):
    """The V4-Flash config cut to `layers` backbone layers."""
    if ratios is None:
        real = V4_FLASH["compress_ratios"]
        ratios = (real[1:] + [0])[:layers]  # drop one of the two leading sliding layers
    if len(ratios) != layers:
        raise Failure(f"--ratios has {len(ratios)} entries but --layers is {layers}")
    for r in ratios:
        if r not in (0, 4, 128):
            raise Failure(f"--ratios: {r} is not 0 (sliding), 4 (CSA) or 128 (HCA)")
    c = dict(V4_FLASH)
    c.update(num_hidden_layers=layers, compress_ratios=list(ratios), num_hash_layers=min(hash_layers, layers))
    return c


def cut_config(c, layers, path):
    """A flat official config cut to its first `layers` layers (the MTP stages dropped)."""
    if "text_config" in c or "layer_types" in c:
        raise Failure(f"{path}: expected the flat official DeepSeek-V4 config (compress_ratios), not a "
                      "transformers or V4.1 config")
    have = c.get("num_hidden_layers")
    if not isinstance(have, int):
        raise Failure(f"{path}: no integer num_hidden_layers")
    if layers > have:
        raise Failure(f"--layers {layers}: {path} has only {have} layers")
    c = dict(c)
    c["num_hidden_layers"] = layers
    c["compress_ratios"] = list(c["compress_ratios"][:layers])
    c["num_nextn_predict_layers"] = 0
    return c


def key(c, name, path):
    if name not in c:
        raise Failure(f"{path}: missing key '{name}'")
    return c[name]


def expected_tensors(c, path="config"):
    """(name, dtype, shape) of every tensor of the official layout, written from the release's tensor table."""
    D, V, L = key(c, "hidden_size", path), key(c, "vocab_size", path), key(c, "num_hidden_layers", path)
    H, hd, Q = key(c, "num_attention_heads", path), key(c, "head_dim", path), key(c, "q_lora_rank", path)
    G, R = key(c, "o_groups", path), key(c, "o_lora_rank", path)
    E, K = key(c, "n_routed_experts", path), key(c, "num_experts_per_tok", path)
    F = key(c, "moe_intermediate_size", path)
    FS = F * c.get("n_shared_experts", 1)
    n = key(c, "hc_mult", path)
    HI, dI = key(c, "index_n_heads", path), key(c, "index_head_dim", path)
    ratios = key(c, "compress_ratios", path)
    if len(ratios) < L:
        raise Failure(f"{path}: compress_ratios has {len(ratios)} entries but num_hidden_layers is {L}")
    hash_layers = c.get("num_hash_layers", 3)  # transformers' default for deepseek_v4
    mix = (2 + n) * n  # pre, post and the n x n residual mix

    out = []

    def add(name, shape):
        if name.endswith("tid2eid"):
            dtype = "I64"
        elif len(shape) == 2 and name.endswith(".weight"):
            dtype = "BF16"
        else:
            dtype = "F32"
        out.append((name, dtype, list(shape)))

    add("embed.weight", [V, D])
    add("head.weight", [V, D])
    add("norm.weight", [D])
    add("hc_head_fn", [n, n * D])
    add("hc_head_base", [n])
    add("hc_head_scale", [1])
    for i in range(L):
        p, ratio = f"layers.{i}.", ratios[i]
        add(p + "attn_norm.weight", [D])
        add(p + "ffn_norm.weight", [D])
        for site in ("attn", "ffn"):
            add(p + f"hc_{site}_fn", [mix, n * D])
            add(p + f"hc_{site}_base", [mix])
            add(p + f"hc_{site}_scale", [3])
        add(p + "attn.wq_a.weight", [Q, D])
        add(p + "attn.q_norm.weight", [Q])
        add(p + "attn.wq_b.weight", [H * hd, Q])
        add(p + "attn.wkv.weight", [hd, D])
        add(p + "attn.kv_norm.weight", [hd])
        add(p + "attn.wo_a.weight", [G * R, H * hd // G])
        add(p + "attn.wo_b.weight", [D, G * R])
        add(p + "attn.attn_sink", [H])
        if ratio:
            width = 2 * hd if ratio == 4 else hd  # CSA's windows overlap: two series per token
            add(p + "attn.compressor.wkv.weight", [width, D])
            add(p + "attn.compressor.wgate.weight", [width, D])
            add(p + "attn.compressor.ape", [ratio, width])
            add(p + "attn.compressor.norm.weight", [hd])
        if ratio == 4:
            add(p + "attn.indexer.wq_b.weight", [HI * dI, Q])
            add(p + "attn.indexer.weights_proj.weight", [HI, D])
            add(p + "attn.indexer.compressor.wkv.weight", [2 * dI, D])
            add(p + "attn.indexer.compressor.wgate.weight", [2 * dI, D])
            add(p + "attn.indexer.compressor.ape", [4, 2 * dI])
            add(p + "attn.indexer.compressor.norm.weight", [dI])
        add(p + "ffn.gate.weight", [E, D])
        if i < hash_layers:
            add(p + "ffn.gate.tid2eid", [V, K])
        else:
            add(p + "ffn.gate.bias", [E])
        for e in range(E):
            add(p + f"ffn.experts.{e}.w1.weight", [F, D])
            add(p + f"ffn.experts.{e}.w2.weight", [D, F])
            add(p + f"ffn.experts.{e}.w3.weight", [F, D])
        if FS:
            add(p + "ffn.shared_experts.w1.weight", [FS, D])
            add(p + "ffn.shared_experts.w2.weight", [D, FS])
            add(p + "ffn.shared_experts.w3.weight", [FS, D])
    return out


def header_of(tensors):
    """The safetensors header (insertion-ordered dict) and the payload size: larger elements first, then name."""
    header = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, dtype, shape in sorted(tensors, key=lambda t: (-ELEMENT_SIZE[t[1]], t[0])):
        size = ELEMENT_SIZE[dtype]
        for d in shape:
            size *= d
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    return header, offset


def write_sparse(path, header, payload):
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the data region starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        f.truncate(8 + len(text) + payload)  # the data: a hole


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="output directory (created if missing)")
    ap.add_argument("--config", help="flat official DeepSeek-V4 config.json to use instead of V4-Flash")
    ap.add_argument("--layers", type=int, help="backbone layers (V4-Flash slice: default 3)")
    ap.add_argument("--hash-layers", type=int, default=1, help="V4-Flash slice: hash-routed layers first (default 1)")
    ap.add_argument("--ratios", help="V4-Flash slice: compress ratio per layer, e.g. 0,4,128")
    args = ap.parse_args()
    try:
        if args.layers is not None and args.layers < 1:
            raise Failure(f"--layers {args.layers}: need at least 1")
        if args.config:
            if args.ratios:
                raise Failure("--ratios applies to the V4-Flash slice only (edit the config's compress_ratios)")
            try:
                with open(args.config) as f:
                    c = json.load(f)
            except (OSError, ValueError) as e:
                raise Failure(f"{args.config}: cannot read: {e}")
            if args.layers is not None:
                c = cut_config(c, args.layers, args.config)
            source = args.config
        else:
            ratios = [int(r) for r in args.ratios.split(",")] if args.ratios else None
            layers = args.layers if args.layers is not None else (len(ratios) if ratios else 3)
            c = flash_slice(layers, args.hash_layers, ratios)
            source = "V4-Flash"
        tensors = expected_tensors(c, source)
        header, payload = header_of(tensors)
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "config.json"), "w") as f:
            json.dump(c, f, indent=2)
            f.write("\n")
        write_sparse(os.path.join(args.out, "model.safetensors"), header, payload)
        index = {"metadata": {"total_size": payload},
                 "weight_map": {name: "model.safetensors" for name in sorted(t[0] for t in tensors)}}
        with open(os.path.join(args.out, "model.safetensors.index.json"), "w") as f:
            json.dump(index, f, indent=2)
            f.write("\n")
    except Failure as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    kinds = {0: "sliding", 4: "CSA", 128: "HCA"}
    schedule = ", ".join(kinds.get(r, f"ratio {r}") for r in c["compress_ratios"][: c["num_hidden_layers"]])
    print(f"{args.out}: {len(tensors)} tensors, {payload:,} payload bytes (sparse: no data written); "
          f"layers: {schedule}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
