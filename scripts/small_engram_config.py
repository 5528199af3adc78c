#!/usr/bin/env python3
"""Writes a copy of a V4.1 config.json whose Engram tables are small (engram_vocab_size V, default 166000: ~1 GB a
table instead of ~98 GB), with engram_num_embeddings set to the sums of the primes the hash uses (the architecture
spec, section 2.6: per layer, order and head the next unused prime above V - 1; a table has exactly their sum rows).
Everything else is kept, so a slice made from it has the bench slice's layers and per-step work (the same 24 rows a
step looked up, from a smaller table) and fits an 80 GB GPU: the H100 A/B plans of scripts/gpu_plans.sh (H100=1).
usage: scripts/small_engram_config.py CONFIG.json OUT.json [V]"""
import json
import sys


def is_prime(n):
    if n < 2:
        return False
    if n % 2 == 0:
        return n == 2
    i = 3
    while i * i <= n:
        if n % i == 0:
            return False
        i += 2
    return True


def main():
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__.strip().splitlines()[-1])
    src, dst = sys.argv[1], sys.argv[2]
    vocab = int(sys.argv[3]) if len(sys.argv) == 4 else 166000
    with open(src) as f:
        config = json.load(f)
    t = config.get("text_config", config)
    if not t.get("engram_layer_ids"):
        sys.exit(f"error: {src} has no Engram layers (engram_layer_ids)")
    cols = (t["engram_max_ngram_size"] - 1) * t["engram_n_heads"]
    if vocab <= 2 or vocab > t["engram_vocab_size"]:
        sys.exit(f"error: engram_vocab_size {vocab} must be in (2, {t['engram_vocab_size']}]")
    p, sums = vocab - 1, []
    for _ in t["engram_layer_ids"]:
        total = 0
        for _ in range(cols):
            p += 1
            while not is_prime(p):  # primes only grow, so none repeats
                p += 1
            total += p
        sums.append(total)
    t["engram_vocab_size"] = vocab
    t["engram_num_embeddings"] = sums
    with open(dst, "w") as f:
        json.dump(config, f, indent=1)
    print(f"{dst}: engram_vocab_size {vocab}, engram_num_embeddings {sums}")


if __name__ == "__main__":
    main()
