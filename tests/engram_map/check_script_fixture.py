#!/usr/bin/env python3
"""GPU-machine test (it has the `tokenizers` package): scripts/make_engram_token_map.py on the hand-made
byte-level tokenizer in tests/frontend/data/engram_tokenizer must write exactly the map worked out by hand
in expected_token_map.json, and refuse a config whose engram_compressed_vocab_size disagrees.

    check_script_fixture.py SCRIPT FIXTURE_DIR WORK_DIR
"""
import json
import os
import shutil
import struct
import subprocess
import sys


def read_map(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    t = header["engram.token_map"]
    assert t["dtype"] == "I32", t
    begin, end = t["data_offsets"]
    data = blob[8 + n + begin:8 + n + end]
    return list(struct.unpack(f"<{t['shape'][0]}i", data)), header.get("__metadata__", {})


def main(script, fixture, work):
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    for name in ("tokenizer.json", "config.json"):
        shutil.copy(os.path.join(fixture, name), work)
    with open(os.path.join(fixture, "expected_token_map.json"), encoding="utf-8") as f:
        want = json.load(f)

    r = subprocess.run([sys.executable, script, work], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"FAIL: {script} {work} exited {r.returncode}:\n{r.stderr}")
    got, meta = read_map(os.path.join(work, "engram_token_map.safetensors"))
    bad = [(i, got[i], want["token_map"][i], want["tokens"][i]) for i in range(len(got))
           if i >= len(want["token_map"]) or got[i] != want["token_map"][i]]
    if len(got) != len(want["token_map"]) or bad:
        sys.exit(f"FAIL: map differs from the hand-made one (id, got, want, token):\n" +
                 "\n".join(repr(b) for b in bad) + f"\ngot  {got}\nwant {want['token_map']}")
    if meta.get("compressed_vocab_size") != str(want["compressed_vocab_size"]) or \
       meta.get("vocab_size") != str(want["vocab_size"]) or len(meta.get("tokenizer_json_sha256", "")) != 64:
        sys.exit(f"FAIL: metadata {meta}")

    # A config that counts another number of compressed ids: one error line naming both numbers.
    bad_cfg = {"vocab_size": want["vocab_size"], "engram_compressed_vocab_size": want["compressed_vocab_size"] + 1}
    with open(os.path.join(work, "config.json"), "w") as f:
        json.dump(bad_cfg, f)
    r = subprocess.run([sys.executable, script, work, "-o", os.path.join(work, "x.safetensors")],
                       capture_output=True, text=True)
    want_err = f"{want['compressed_vocab_size']} distinct keys"
    if r.returncode != 1 or want_err not in r.stderr or str(want["compressed_vocab_size"] + 1) not in r.stderr:
        sys.exit(f"FAIL: mismatched config: rc {r.returncode}, stderr {r.stderr!r}")
    print("1 passed, 0 failed")


if __name__ == "__main__":
    main(*sys.argv[1:4])
