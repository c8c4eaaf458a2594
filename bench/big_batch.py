"""Writes one large packed batch as a .safetensors file, for the memory and throughput benchmark
of `thdcheck check` (bench/big_batch.sh). Needs numpy; writes the safetensors format by hand
(an 8-byte header length, the JSON header, the raw little-endian tensors) one tensor at a time,
so the writer itself never holds more than one tensor.

    python bench/big_batch.py OUT.safetensors [TOKENS] [--dtype int32|int64] [--max-doc N]

The batch is what transformers' DataCollatorWithFlattening(return_flash_attn_kwargs=True)
returns: one row of TOKENS tokens (default 1e8) holding documents of 1 to N tokens (seeded;
N = 4096 by default, `--max-doc 1`: one-token documents, the most offsets a batch can hold),
`input_ids`, `labels` (-100 at each document's first token), `position_ids` restarting per
document, `cu_seq_lens_q` / `cu_seq_lens_k` (int32, as transformers writes them) and
`max_length_q`.
"""

from __future__ import annotations

import json
import struct
import sys

import numpy as np


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    dtype = np.int64 if "--dtype" in sys.argv and sys.argv[sys.argv.index("--dtype") + 1] == "int64" else np.int32
    if "--dtype" in sys.argv:
        args.remove(sys.argv[sys.argv.index("--dtype") + 1])
    max_doc = 4096
    if "--max-doc" in sys.argv:
        max_doc = int(sys.argv[sys.argv.index("--max-doc") + 1])
        args.remove(sys.argv[sys.argv.index("--max-doc") + 1])
    out = args[0]
    tokens = int(float(args[1])) if len(args) > 1 else 100_000_000
    rng = np.random.default_rng(0)
    if max_doc == 1:
        lens = np.ones(tokens, dtype=np.int64)
    else:
        lens = []
        total = 0
        while total < tokens:
            n = int(min(rng.integers(1, max_doc + 1), tokens - total))
            lens.append(n)
            total += n
        lens = np.array(lens, dtype=np.int64)
    cu = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
    starts = cu[:-1].astype(np.int64)

    def input_ids():
        return rng.integers(3, 50_000, size=tokens, dtype=np.int64).astype(dtype)

    ids = input_ids()

    def labels():
        lab = ids.copy()
        lab[starts] = -100
        return lab

    def positions():
        pos = np.arange(tokens, dtype=np.int64)
        pos -= np.repeat(starts, lens)
        return pos.astype(dtype)

    dt = "I32" if dtype == np.int32 else "I64"
    width = np.dtype(dtype).itemsize
    tensors = [
        # Sorted by name, as safetensors writes them; the big ones are generated when written.
        ("cu_seq_lens_k", "I32", [len(cu)], lambda: cu),
        ("cu_seq_lens_q", "I32", [len(cu)], lambda: cu),
        ("input_ids", dt, [1, tokens], lambda: ids),
        ("labels", dt, [1, tokens], labels),
        ("max_length_q", "I64", [], lambda: np.array(int(lens.max()), dtype=np.int64)),
        ("position_ids", dt, [1, tokens], positions),
    ]
    size = {"I32": 4, "I64": 8}
    header = {"__metadata__": {"causal": "true", "profile": "transformers"}}
    offset = 0
    for name, d, shape, _ in tensors:
        n = int(np.prod(shape)) * size[d]
        header[name] = {"dtype": d, "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(out, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for name, d, _, make in tensors:
            arr = make()
            f.write(np.ascontiguousarray(arr, dtype="<i4" if d == "I32" else "<i8").tobytes())
            del arr
    print(f"{out}: {tokens} tokens, {len(lens)} documents, {dt} ids ({width} bytes), {offset + 8 + len(h)} bytes")


if __name__ == "__main__":
    main()
