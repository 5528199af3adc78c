#!/usr/bin/env python3
"""transformers' DeepSeek-V4 (eager) on one GPU: prefill and batch-1 decode times of a V4 config with random
bf16 weights, the baseline of the side-by-side bench (docs/performance.md, scripts/gpu_side_by_side.sh).

    scripts/v4_side_by_side.py CONFIG.json [--prompt-len 1024] [--steps 16] [--experts eager,grouped_mm]
                               [--seed 1] [--fp32-modules auto|off] [--out FILE.json]

CONFIG.json is the flat official config (scripts/make_v4_slice.py writes it; smelt compiles the same file).
The model is built from it directly on the GPU with bf16 as the default dtype (no fp32 copy anywhere), then
the modules transformers' loader keeps in fp32 (its `_keep_in_fp32_modules_strict`: hyper-connections, norms,
sinks, compressor position biases, the router's correction bias) are cast to fp32, as from_pretrained would
leave them (if a smoke forward fails that way, they stay bf16 and the JSON says so). Weights are transformers'
own random init, except tid2eid: its init is all zeros (every token to expert 0), so each row gets top-k
distinct random experts as in a real checkpoint. Attention is "eager" (the only one V4 supports); the routed
experts run with each implementation named in --experts ("eager" loops over the selected experts).

Per experts implementation: a warm-up (prefill of the same length + 2 decode steps, thrown away), then the timed
prefill of P random tokens (fresh cache, logits of the last row only, as generate does) and S greedy decode
steps at batch 1 with the cache (past_key_values), each step timed from a synchronized start to the
synchronized end of the forward + argmax (wall clock; CUDA events around the same span also recorded). Also
measured: a device-to-device copy of 1 GiB (the bandwidth the bytes floor uses, counted read + write, like
smelt-run bench), the weight bytes (parameters + persistent buffers) and an estimate of the bytes a decode step
must read (every non-expert weight once, one embedding row, K routed experts per layer).

Prints the JSON report to stdout and writes it to --out. Exit 0 when at least one implementation ran.
"""
import argparse
import gc
import json
import math
import statistics
import sys
import time
import traceback

CSA, HCA, SLIDING = "compressed_sparse_attention", "heavily_compressed_attention", "sliding_attention"


def hf_config_kwargs(c):
    """DeepseekV4Config keyword arguments for a flat official config (the modern field names)."""
    n = c["num_hidden_layers"]
    ratios = list(c["compress_ratios"][:n])
    hca = sorted({r for r in ratios if r not in (0, 4)})
    if len(hca) > 1:
        raise ValueError(f"transformers has one HCA rate per model; the config has {hca}")
    kinds = [SLIDING if r == 0 else CSA if r == 4 else HCA for r in ratios]
    n_hash = c.get("num_hash_layers", 3)
    kw = dict(
        vocab_size=c["vocab_size"], hidden_size=c["hidden_size"], moe_intermediate_size=c["moe_intermediate_size"],
        num_hidden_layers=n, num_attention_heads=c["num_attention_heads"],
        num_key_value_heads=c.get("num_key_value_heads", 1), head_dim=c["head_dim"], q_lora_rank=c["q_lora_rank"],
        num_experts_per_tok=c["num_experts_per_tok"], n_routed_experts=c["n_routed_experts"],
        n_shared_experts=c.get("n_shared_experts", 1), scoring_func=c.get("scoring_func", "sqrtsoftplus"),
        norm_topk_prob=c.get("norm_topk_prob", True), routed_scaling_factor=float(c.get("routed_scaling_factor", 1.0)),
        max_position_embeddings=c.get("max_position_embeddings", 1048576), rope_theta=float(c.get("rope_theta", 1e4)),
        layer_types=kinds, compress_rates={CSA: 4, HCA: hca[0] if hca else 128},
        compress_rope_theta=float(c.get("compress_rope_theta", 160000.0)), hc_mult=c["hc_mult"],
        hc_sinkhorn_iters=c["hc_sinkhorn_iters"], hc_eps=float(c.get("hc_eps", 1e-6)),
        mlp_layer_types=["hash_moe" if i < n_hash else "moe" for i in range(n)],
        swiglu_limit=float(c.get("swiglu_limit", 10.0)), sliding_window=c["sliding_window"], o_groups=c["o_groups"],
        o_lora_rank=c["o_lora_rank"], index_n_heads=c["index_n_heads"], index_head_dim=c["index_head_dim"],
        index_topk=c["index_topk"], num_nextn_predict_layers=0, rms_norm_eps=float(c.get("rms_norm_eps", 1e-6)),
        partial_rotary_factor=c["qk_rope_head_dim"] / c["head_dim"], tie_word_embeddings=False,
        bos_token_id=c.get("bos_token_id", 0), eos_token_id=c.get("eos_token_id", 1),
        hidden_act=c.get("hidden_act", "silu"),
    )
    rs = c.get("rope_scaling")
    if rs:
        kw["rope_parameters"] = dict(rope_type=rs.get("rope_type", rs.get("type", "yarn")), factor=float(rs["factor"]),
                                     beta_fast=float(rs.get("beta_fast", 32.0)), beta_slow=float(rs.get("beta_slow", 1.0)),
                                     original_max_position_embeddings=rs.get("original_max_position_embeddings", 65536))
    return kw


def cast_keep_fp32(model, torch, dtype):
    """Casts the parameters / buffers under the modules transformers keeps in fp32 to `dtype`; returns the names."""
    keep = set(getattr(model, "_keep_in_fp32_modules_strict", None) or [])
    done = []
    for name, t in list(model.named_parameters()) + list(model.named_buffers()):
        if t.is_floating_point() and keep & set(name.split(".")):
            t.data = t.data.to(dtype)
            done.append(name)
    return done


def weight_bytes(model, c):
    """(total, by dtype, decode-step estimate) over the state dict (parameters + persistent buffers)."""
    total, by_dtype, experts, lookups = 0, {}, 0, 0
    for name, t in model.state_dict().items():
        b = t.numel() * t.element_size()
        total += b
        dt = str(t.dtype).replace("torch.", "")
        by_dtype[dt] = by_dtype.get(dt, 0) + b
        if ".mlp.experts." in name:
            experts += b
        if name == "model.embed_tokens.weight" or name.endswith("tid2eid"):  # one row looked up per token
            lookups += b - b // t.shape[0]
    n, E, K = c["num_hidden_layers"], c["n_routed_experts"], c["num_experts_per_tok"]
    step = total - experts - lookups + (experts // (n * E)) * K * n
    return total, by_dtype, step


def copy_bandwidth(torch):
    """Device-to-device copy of 1 GiB, median of 10 after a warm-up, counted read + write (GB/s)."""
    n = 1 << 30
    src = torch.empty(n, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    times = []
    for i in range(11):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        dst.copy_(src)
        b.record()
        torch.cuda.synchronize()
        if i:
            times.append(a.elapsed_time(b))
    del src, dst
    return 2 * n / (statistics.median(times) * 1e-3) / 1e9


def run_once(model, torch, prompt, steps, vocab):
    """Prefill `prompt` then `steps` greedy decode steps: (prefill ms, decode wall ms list, decode event ms list)."""
    P = prompt.shape[1]
    with torch.inference_mode():
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = model(input_ids=prompt, position_ids=torch.arange(P, device="cuda")[None], use_cache=True,
                    logits_to_keep=1)
        tok = out.logits[:, -1].argmax(-1, keepdim=True)
        torch.cuda.synchronize()
        prefill_ms = (time.perf_counter() - t0) * 1e3
        cache = out.past_key_values
        wall, events = [], []
        for i in range(steps):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            a.record()
            out = model(input_ids=tok, position_ids=torch.tensor([[P + i]], device="cuda"), past_key_values=cache,
                        use_cache=True)
            cache = out.past_key_values
            tok = out.logits[:, -1].argmax(-1, keepdim=True)
            b.record()
            torch.cuda.synchronize()
            wall.append((time.perf_counter() - t0) * 1e3)
            events.append(a.elapsed_time(b))
        assert 0 <= int(tok) < vocab
        del out, cache
    return prefill_ms, wall, events


def pct(xs, q):
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, int(math.ceil(q * len(s))) - 1))]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("config")
    ap.add_argument("--prompt-len", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--experts", default="eager,grouped_mm", help="experts implementations to time, in order")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--fp32-modules", choices=("auto", "off"), default="auto",
                    help="auto: the modules transformers keeps in fp32 in fp32 if the forward takes them; off: all bf16")
    ap.add_argument("--out", help="also write the JSON report here")
    args = ap.parse_args()
    report = {"config": args.config, "prompt_tokens": args.prompt_len, "decode_steps": args.steps, "runs": []}

    def finish(code):
        text = json.dumps(report, indent=2)
        print(text)
        if args.out:
            with open(args.out, "w") as f:
                f.write(text + "\n")
        return code

    try:
        import torch
        import transformers
        try:
            from transformers import DeepseekV4Config, DeepseekV4ForCausalLM
        except ImportError:
            from transformers.models.deepseek_v4 import DeepseekV4Config, DeepseekV4ForCausalLM
        report.update(torch=torch.__version__, transformers=transformers.__version__,
                      device=torch.cuda.get_device_name(0))
        with open(args.config) as f:
            c = json.load(f)
        cfg = DeepseekV4Config(**hf_config_kwargs(c))
        report.update(layer_types=list(cfg.layer_types), mlp_layer_types=list(cfg.mlp_layer_types))
        report["copy_bandwidth_gbps"] = copy_bandwidth(torch)

        # Random weights straight on the GPU in bf16.
        torch.manual_seed(args.seed)
        t0 = time.perf_counter()
        torch.set_default_dtype(torch.bfloat16)
        try:
            with torch.device("cuda"):
                model = DeepseekV4ForCausalLM(cfg)
        finally:
            torch.set_default_dtype(torch.float32)
        model.eval()
        if hasattr(model, "set_attn_implementation"):
            model.set_attn_implementation("eager")
        report["attn_implementation"] = getattr(model.config, "_attn_implementation", None)
        with torch.no_grad():
            E, K = c["n_routed_experts"], c["num_experts_per_tok"]
            for name, buf in model.named_buffers():
                if name.endswith("tid2eid"):  # K distinct experts per token
                    rows = torch.rand(buf.shape[0], E, device="cuda").argsort(dim=1)[:, :K]
                    buf.copy_(rows.to(buf.dtype))
        report["build_s"] = time.perf_counter() - t0
        g = torch.Generator(device="cpu").manual_seed(args.seed + 7919)
        vocab = c["vocab_size"]
        prompt = torch.randint(2, vocab, (1, args.prompt_len), generator=g).cuda()

        # The fp32 modules of from_pretrained, if the forward takes them.
        if args.fp32_modules == "auto":
            kept = cast_keep_fp32(model, torch, torch.float32)
            try:
                run_once(model, torch, prompt[:, :16], 1, vocab)
                report["fp32_modules"] = f"{len(kept)} tensors in fp32 (transformers' _keep_in_fp32_modules_strict)"
            except Exception as e:
                traceback.print_exc(file=sys.stderr)
                cast_keep_fp32(model, torch, torch.bfloat16)
                msg = (str(e).splitlines() or [""])[0][:300]
                report["fp32_modules"] = f"none: the forward failed with them in fp32 ({type(e).__name__}: {msg}); all bf16"
        else:
            report["fp32_modules"] = "none (--fp32-modules off): all bf16"
        total, by_dtype, step = weight_bytes(model, c)
        report.update(weight_bytes=total, weight_bytes_by_dtype=by_dtype, decode_bytes_per_step_est=step,
                      decode_floor_ms=step / (report["copy_bandwidth_gbps"] * 1e9) * 1e3)

        for impl in [s for s in args.experts.split(",") if s]:
            run = {"experts_implementation": impl}
            report["runs"].append(run)
            try:
                if hasattr(model, "set_experts_implementation"):
                    model.set_experts_implementation(impl)
                elif impl != "eager":
                    raise RuntimeError("this transformers has no set_experts_implementation")
                run["experts_implementation_set"] = getattr(model.config, "_experts_implementation", None)
                torch.cuda.reset_peak_memory_stats()
                run_once(model, torch, prompt, 2, vocab)  # warm-up: same shapes, thrown away
                prefill_ms, wall, events = run_once(model, torch, prompt, args.steps, vocab)
                med = statistics.median(wall)
                run.update(ok=True, prefill_ms=prefill_ms, prefill_tokens_per_s=args.prompt_len / prefill_ms * 1e3,
                           decode_ms_median=med, decode_ms_p10=pct(wall, 0.1), decode_ms_p90=pct(wall, 0.9),
                           decode_event_ms_median=statistics.median(events), decode_ms_all=wall,
                           decode_tokens_per_s=1e3 / med, ratio_to_floor=report["decode_floor_ms"] / med,
                           peak_memory_bytes=torch.cuda.max_memory_allocated())
            except Exception as e:
                run.update(ok=False, error=f"{type(e).__name__}: {(str(e).splitlines() or [''])[0][:300]}")
                traceback.print_exc(file=sys.stderr)
            gc.collect()
            torch.cuda.empty_cache()
        del model
        gc.collect()
        torch.cuda.empty_cache()
    except Exception as e:
        report["error"] = f"{type(e).__name__}: {(str(e).splitlines() or [''])[0][:300]}"
        traceback.print_exc(file=sys.stderr)
        return finish(1)
    return finish(0 if any(r.get("ok") for r in report["runs"]) else 1)


if __name__ == "__main__":
    sys.exit(main())
