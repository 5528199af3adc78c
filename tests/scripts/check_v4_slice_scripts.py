#!/usr/bin/env python3
"""Checks the python parts of the side-by-side bench (docs/performance.md) that run without a GPU.

    check_v4_slice_scripts.py REPO_ROOT WORK_DIR [SMELT_COMPILE]

scripts/make_v4_slice.py (sparse V4 checkpoints):
1. For every tiny V4 fixture whose model.safetensors transformers wrote (examples/tiny-v4, tests/golden/v4/*),
   the script given that fixture's config.json must write a header with exactly the fixture's tensors: same
   names in the same order, dtypes, shapes and data offsets; the same index.json; a data region of the
   fixture's size that holds no bytes.
2. The V4-Flash slice (--layers 3): its config carries V4-Flash's dimensions (spec section 1.3) and the
   schedule sliding / CSA / HCA, and its payload is the total worked out by hand below.
3. Bad input: exit 1 with one "error: ..." line.
4. With SMELT_COMPILE: the frontend accepts the slice (--dry-run) and it compiles for the cpu target.
scripts/v4_side_by_side.py (runs on the GPU machine; torch is imported only there):
5. hf_config_kwargs of each fixture's official config.json gives the values transformers wrote into that
   fixture's hf/config.json (layer and MLP types, HCA rate, rope fraction, YaRN block, every size).
"""
import json
import os
import shutil
import struct
import subprocess
import sys

failures = []


def check(ok, msg):
    if not ok:
        failures.append(msg)
        print("FAIL: " + msg)


def header(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return n, json.loads(f.read(n))  # dicts keep the file's order


def run(args):
    return subprocess.run([sys.executable] + args, capture_output=True, text=True)


def main():
    root, work = sys.argv[1], sys.argv[2]
    compile_bin = sys.argv[3] if len(sys.argv) > 3 else None
    script = os.path.join(root, "scripts", "make_v4_slice.py")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)

    # 1. The tiny fixtures, as transformers' safetensors writer laid them out.
    fixtures = [os.path.join(root, "examples", "tiny-v4")]
    gold = os.path.join(root, "tests", "golden", "v4")
    fixtures += sorted(os.path.join(gold, d) for d in os.listdir(gold) if os.path.isdir(os.path.join(gold, d)))
    for fx in fixtures:
        name = os.path.basename(fx)
        out = os.path.join(work, name)
        r = run([script, "--config", os.path.join(fx, "config.json"), "--out", out])
        check(r.returncode == 0, f"{name}: exit {r.returncode}: {r.stderr.strip()}")
        if r.returncode:
            continue
        n_want, want = header(os.path.join(fx, "model.safetensors"))
        n_got, got = header(os.path.join(out, "model.safetensors"))
        check(list(got) == list(want), f"{name}: tensor names or their order differ: "
              f"missing {sorted(set(want) - set(got))[:5]}, extra {sorted(set(got) - set(want))[:5]}")
        for k in want:
            if k in got and got[k] != want[k]:
                check(False, f"{name}: {k}: got {got[k]}, the fixture has {want[k]}")
        check(n_got == n_want, f"{name}: header length {n_got}, the fixture's {n_want}")
        size_want = os.path.getsize(os.path.join(fx, "model.safetensors"))
        size_got = os.path.getsize(os.path.join(out, "model.safetensors"))
        check(size_got == size_want, f"{name}: file size {size_got}, the fixture's {size_want}")
        blocks = os.stat(os.path.join(out, "model.safetensors")).st_blocks * 512
        check(blocks < 8 + n_got + 65536, f"{name}: {blocks} bytes allocated: the data region is not a hole")
        with open(os.path.join(fx, "model.safetensors.index.json")) as f:
            iw = json.load(f)
        with open(os.path.join(out, "model.safetensors.index.json")) as f:
            ig = json.load(f)
        check(ig == iw, f"{name}: model.safetensors.index.json differs from the fixture's")
        print(f"{name}: {len(want) - 1} tensors as transformers wrote them")

    # 2. The V4-Flash slice.
    out = os.path.join(work, "v4flash3")
    r = run([script, "--out", out, "--layers", "3"])
    check(r.returncode == 0, f"v4flash3: exit {r.returncode}: {r.stderr.strip()}")
    if r.returncode == 0:
        with open(os.path.join(out, "config.json")) as f:
            c = json.load(f)
        flash = dict(hidden_size=4096, num_attention_heads=64, head_dim=512, qk_rope_head_dim=64, q_lora_rank=1024,
                     o_groups=8, o_lora_rank=1024, n_routed_experts=256, num_experts_per_tok=6,
                     moe_intermediate_size=2048, index_n_heads=64, index_head_dim=128, index_topk=512,
                     vocab_size=129280, hc_mult=4, sliding_window=128, num_hidden_layers=3,
                     compress_ratios=[0, 4, 128], num_hash_layers=1, num_nextn_predict_layers=0)
        for k, v in flash.items():
            check(c.get(k) == v, f"v4flash3: config {k} = {c.get(k)}, want {v}")
        check("quantization_config" not in c, "v4flash3: the slice must be unquantized (bf16)")
        # Payload by hand (bytes): embed + head 2*129280*4096*2 = 2,118,123,520; norm, hc_head 278,548.
        # Every layer: norms + hc 3,178,712; attention 213,915,904; gate + 256 experts + shared 12,937,330,688.
        # Layer 0 + tid2eid 129280*6*8 = 6,205,440; layer 1 (CSA) + bias 1,024 + compressor 16,795,648
        # + indexer 21,500,416; layer 2 (HCA) + bias 1,024 + compressor 8,652,800.
        want_payload = 41_634_834_332
        n, h = header(os.path.join(out, "model.safetensors"))
        payload = max(v["data_offsets"][1] for k, v in h.items() if k != "__metadata__")
        check(payload == want_payload, f"v4flash3: payload {payload}, want {want_payload}")
        check(os.path.getsize(os.path.join(out, "model.safetensors")) == 8 + n + want_payload, "v4flash3: file size")
        check(h.get("layers.0.ffn.gate.tid2eid", {}).get("shape") == [129280, 6], "v4flash3: layer 0 tid2eid")
        check("layers.1.attn.indexer.wq_b.weight" in h and "layers.2.attn.indexer.wq_b.weight" not in h,
              "v4flash3: the indexer belongs to the CSA layer (1) only")
        check(h.get("layers.2.attn.compressor.ape", {}).get("shape") == [128, 512], "v4flash3: HCA ape [128, 512]")
        check(h.get("layers.1.attn.compressor.wkv.weight", {}).get("shape") == [1024, 4096],
              "v4flash3: CSA compressor wkv [1024, 4096] (overlapping windows)")
        w2 = h.get("layers.0.ffn.experts.255.w2.weight", {})
        check((w2.get("dtype"), w2.get("shape")) == ("BF16", [4096, 2048]), "v4flash3: expert w2 BF16 [4096, 2048]")

    # 3. Bad input.
    for args, what in (([script, "--config", os.path.join(root, "examples", "tiny-v4", "config.json"), "--layers", "9",
                         "--out", os.path.join(work, "bad")], "has only 5 layers"),
                       ([script, "--ratios", "0,5", "--out", os.path.join(work, "bad")], "is not 0 (sliding)"),
                       ([script, "--config", os.path.join(work, "missing.json"), "--out", os.path.join(work, "bad")],
                        "cannot read")):
        r = run(args)
        lines = r.stderr.strip().splitlines()
        check(r.returncode == 1 and len(lines) == 1 and lines[0].startswith("error: ") and what in lines[0],
              f"bad input {args[1:]}: exit {r.returncode}, stderr {r.stderr.strip()!r}")

    # 4. The frontend takes the slice.
    if compile_bin and os.path.isdir(out):
        r = subprocess.run([compile_bin, out, "--dry-run"], capture_output=True, text=True)
        check(r.returncode == 0 and "2,387 tensors" in r.stdout, f"smelt-compile --dry-run: {r.returncode} {r.stdout}{r.stderr}")
        plan = os.path.join(work, "v4flash3.smelt")
        r = subprocess.run([compile_bin, out, "--target", "cpu", "-o", plan], capture_output=True, text=True)
        check(r.returncode == 0 and os.path.isfile(plan), f"smelt-compile --target cpu: {r.returncode} {r.stderr}")

    # 5. The transformers config of the side-by-side script, against what transformers wrote.
    sys.path.insert(0, os.path.join(root, "scripts"))
    sys.dont_write_bytecode = True  # no __pycache__ in the source tree
    import v4_side_by_side
    for fx in fixtures:
        name = os.path.basename(fx)
        with open(os.path.join(fx, "config.json")) as f:
            kw = v4_side_by_side.hf_config_kwargs(json.load(f))
        with open(os.path.join(fx, "hf", "config.json")) as f:
            hf = json.load(f)
        for k, v in kw.items():
            if k == "rope_parameters":
                compress = hf["rope_parameters"]["compress"]
                for rk, rv in v.items():
                    check(compress.get(rk) == rv, f"{name}: rope_parameters.compress.{rk} = {rv}, transformers wrote "
                          f"{compress.get(rk)}")
            else:
                check(hf.get(k) == v, f"{name}: {k} = {v}, transformers wrote {hf.get(k)}")
        check(("rope_parameters" in kw) == (hf["rope_parameters"]["compress"]["rope_type"] == "yarn"),
              f"{name}: YaRN on the compressed layers")
        print(f"{name}: {len(kw)} transformers config values as transformers wrote them")

    print("FAILED" if failures else "ok")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
