"""Turn a Python packer or collator into a `thdcheck fuzz` adapter (stdlib only).

The protocol (docs/protocol.md): one JSON request per line on stdin, one JSON response per line
on stdout, each carrying ``"thdcheck": 1`` and the request's ``"id"``. This module does the
plumbing; you write the function::

    from thdcheck_adapter import serve_packer

    def pack(lengths, capacity, seed):
        ...                      # -> (packs: list[list[int]], dropped: list[int])

    serve_packer(pack)

Packer functions get ``lengths`` (example ``i`` has ``lengths[i]`` tokens), ``capacity`` and
``seed``, and return packs of example indices plus the indices they dropped on purpose.

Collator functions get the list of examples (``{"input_ids": [...]}``, or for DPO
``{"chosen_input_ids": [...], "rejected_input_ids": [...], "index": i}``) and
``max_seq_length`` (or None), and return the batch dict your collator builds: the same keys a
dumped ``.safetensors`` file has, values as ints or (nested) lists of ints. Torch tensors are
converted with ``.tolist()``.

An exception in your function is answered as ``{"error": traceback}``, which thdcheck reports
(and shrinks) as an adapter error. Print debugging output to stderr, never stdout.
"""

import json
import sys
import traceback

VERSION = 1


def _plain(value):
    """Tensors and tuples to plain JSON values."""
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def serve(handler, stdin=None, stdout=None):
    """Answer requests until stdin closes: ``handler(request) -> dict`` (the payload)."""
    stdin = stdin or sys.stdin
    stdout = stdout or sys.stdout
    for line in stdin:
        line = line.strip()
        if not line:
            continue
        request = json.loads(line)
        reply = {"thdcheck": VERSION, "id": request.get("id")}
        if request.get("thdcheck") != VERSION:
            reply["error"] = "unsupported protocol version %r" % (request.get("thdcheck"),)
        else:
            try:
                reply.update(_plain(handler(request)))
            except Exception:  # reported to thdcheck, which shrinks the failing case
                reply["error"] = traceback.format_exc()
        stdout.write(json.dumps(reply) + "\n")
        stdout.flush()


def serve_packer(pack):
    """Serve ``pack(lengths, capacity, seed) -> (packs, dropped)``; ids are list indices."""

    def handler(request):
        examples = request["examples"]
        lengths = [e["len"] for e in examples]
        packs, dropped = pack(lengths, request["capacity"], request["seed"])
        ids = [e["id"] for e in examples]
        return {
            "packs": [[ids[i] for i in p] for p in packs],
            "dropped": [ids[i] for i in dropped],
        }

    serve(handler)


def serve_collator(collate):
    """Serve ``collate(examples, max_seq_length) -> batch dict``."""

    def handler(request):
        return {"batch": collate(request["examples"], request.get("max_seq_length"))}

    serve(handler)


def serve_logger(log):
    """Serve ``log(request) -> dict`` for ``thdcheck fuzz logger``.

    The request holds ``micro_batches`` (the batch dicts of one step, global before any CP
    split: ``input_ids``, ``labels``, ``cu_seq_lens_q``, and per layout ``num_real_seqs`` or
    ``cu_seq_lens_q_padded``), ``model`` (layers, hidden, heads, kv_heads, head_dim, ffn,
    mlp_projections, vocab, padded_vocab, causal), ``formula``, ``cp_size``, ``dp_size`` (the
    micro-batches are one DP rank's), ``num_gpus``, ``step_time_s`` and
    ``peak_tflops_per_gpu``. Return the values your logger would log, under the record names of
    ``thdcheck metrics --json`` (``tokens.real``, ``flops.useful``, ``mfu_pct.useful``, ...).
    """

    def handler(request):
        return {"logged": log(request)}

    serve(handler)
