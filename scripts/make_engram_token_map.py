#!/usr/bin/env python3
"""Write the DeepSeek-V4.1 Engram compressed-token map of a checkpoint as a safetensors file.

    scripts/make_engram_token_map.py MODEL_DIR [-o FILE]

Engram hashes n-grams of *compressed* token ids: every token id is decoded on its own and normalised, and
ids whose text normalises alike share one compressed id (architecture spec section 2.6, step 1). The map
comes from the tokenizer, not from the weights, so the release does not ship it; smelt-compile reads it
from MODEL_DIR/engram_token_map.safetensors (or --engram-token-map FILE inside MODEL_DIR).

The rule, as the official inference code applies it:
  - text = the raw tokenizer's decode of [id] alone, special tokens kept;
  - text containing U+FFFD (a token that is part of a UTF-8 character): the key is the raw token string;
  - else key = NFKC, NFD, strip accents, lowercase, every run of [ \\t\\r\\n] -> one space, then strip
    (a text that is exactly one space by then stays " "); an empty result keys by the text itself;
  - compressed ids are handed out in order of first appearance of a key, over ids 0 .. vocab-1;
  - the number of keys must equal the config's engram_compressed_vocab_size.

Output: tensor `engram.token_map` I32 [vocab_size]; metadata compressed_vocab_size, vocab_size,
tokenizer_json_sha256. Needs the `tokenizers` package (the same Rust normalisers and decoders the
reference uses: Unicode tables of another library could key a few tokens differently). No numpy.
"""
import argparse
import hashlib
import json
import os
import struct
import sys

TENSOR = "engram.token_map"
DEFAULT_NAME = "engram_token_map.safetensors"


class Failure(Exception):
    pass


def config_value(config, key, path):
    """A field of config.json: top level (flat / inference config) or under text_config (HF nested)."""
    for scope in (config.get("text_config") or {}, config):
        if key in scope:
            value = scope[key]
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise Failure(f"{path}: {key} is {value!r}, not a positive integer")
            return value
    raise Failure(f"{path}: no {key}")


def load_tokenizer(path):
    from tokenizers import Tokenizer

    try:
        return Tokenizer.from_file(path)
    except Exception as e:  # the Rust side raises its own exception types
        raise Failure(f"{path}: cannot load the tokenizer: {e}")


def key_normalizer():
    """The key normaliser. U+E000 (private use) stands in for a lone space so that Strip keeps it."""
    from tokenizers import Regex, normalizers

    lone_space = "\ue000"
    return normalizers.Sequence([
        normalizers.NFKC(),
        normalizers.NFD(),
        normalizers.StripAccents(),
        normalizers.Lowercase(),
        normalizers.Replace(Regex(r"[ \t\r\n]+"), " "),
        normalizers.Replace(Regex(r"^ $"), lone_space),
        normalizers.Strip(),
        normalizers.Replace(lone_space, " "),
    ])


def compressed_token_map(tok):
    """(map, number of keys, keys in compressed-id order)."""
    n = tok.get_vocab_size(with_added_tokens=True)
    norm = key_normalizer()
    ids_of_key = {}
    keys = []
    out = []
    for token_id in range(n):
        raw = tok.id_to_token(token_id)
        if raw is None:
            raise Failure(f"the tokenizer has no token with id {token_id} (its ids must be 0 .. {n - 1})")
        text = tok.decode([token_id], skip_special_tokens=False)
        if "\ufffd" in text:
            key = raw  # part of a UTF-8 character: nothing to normalise
        else:
            key = norm.normalize_str(text) or text
        if key not in ids_of_key:
            ids_of_key[key] = len(keys)
            keys.append(key)
        out.append(ids_of_key[key])
    return out, len(keys), keys


def safetensors_bytes(values, metadata):
    """One I32 vector tensor named TENSOR (little-endian), header padded with spaces to 8 bytes."""
    data = struct.pack(f"<{len(values)}i", *values)
    header = {
        "__metadata__": {k: str(v) for k, v in metadata.items()},
        TENSOR: {"dtype": "I32", "shape": [len(values)], "data_offsets": [0, len(data)]},
    }
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model_dir", help="checkpoint directory with config.json and tokenizer.json")
    ap.add_argument("-o", "--output", help=f"output file (default MODEL_DIR/{DEFAULT_NAME})")
    ap.add_argument("--tokenizer", help="tokenizer.json to use (default MODEL_DIR/tokenizer.json)")
    args = ap.parse_args(argv)
    try:
        import tokenizers  # noqa: F401  (checked first: nothing below works without it)
    except ImportError:
        raise Failure("the Python package `tokenizers` is needed to decode the vocabulary: pip install tokenizers")

    config_path = os.path.join(args.model_dir, "config.json")
    tok_path = args.tokenizer or os.path.join(args.model_dir, "tokenizer.json")
    out_path = args.output or os.path.join(args.model_dir, DEFAULT_NAME)
    try:
        with open(config_path, "rb") as f:
            config = json.load(f)
    except (OSError, ValueError) as e:
        raise Failure(f"{config_path}: cannot read: {e}")
    if not isinstance(config, dict):
        raise Failure(f"{config_path}: not a JSON object")
    vocab = config_value(config, "vocab_size", config_path)
    want = config_value(config, "engram_compressed_vocab_size", config_path)
    try:
        with open(tok_path, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
    except OSError as e:
        raise Failure(f"{tok_path}: cannot read: {e}")

    tok = load_tokenizer(tok_path)
    token_map, got, _ = compressed_token_map(tok)
    if len(token_map) != vocab:
        raise Failure(f"{tok_path}: the tokenizer has {len(token_map)} token ids but {config_path} has "
                      f"vocab_size {vocab}")
    if got != want:
        raise Failure(f"{tok_path}: the tokenizer's tokens normalise to {got} distinct keys but {config_path} has "
                      f"engram_compressed_vocab_size {want} (another tokenizer, or a tokenizers version whose "
                      f"normalisers differ)")

    blob = safetensors_bytes(token_map, {"compressed_vocab_size": got, "vocab_size": vocab,
                                         "tokenizer_json_sha256": digest})
    tmp = out_path + ".tmp"
    try:
        with open(tmp, "wb") as f:
            f.write(blob)
        os.replace(tmp, out_path)
    except OSError as e:
        raise Failure(f"{out_path}: cannot write: {e}")
    print(f"{out_path}: {vocab} token ids -> {got} compressed ids")


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except Failure as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)
