"""Turn a Python packer or collator into a `thdcheck fuzz` adapter (stdlib only).

This one file is both `adapters/python/thdcheck_adapter.py` (a symlink: copy it next to your
adapter, no install needed) and `thdcheck.adapter` in the Python package, whose in-process
fuzzers (`thdcheck.fuzz_collator`, ...) answer requests with the same handlers.

The protocol (docs/protocol.md): one JSON request per line on stdin, one JSON response per line
on stdout, each carrying ``"thdcheck": 1`` and the request's ``"id"``. This module does the
plumbing; you write the function::

    from thdcheck_adapter import serve_packer

    def pack(lengths, capacity, seed):
        ...                      # -> (packs: list[list[int]], dropped: list[int])

    serve_packer(pack)

Packer functions get ``lengths`` (example ``i`` has ``lengths[i]`` tokens), ``capacity`` and
``seed``, and return packs of example indices plus the indices they dropped on purpose (and,
optionally, third, the over-long ones they placed alone in a pack of their own on purpose). A
pack entry may be a piece ``(index, start, end)`` of an example split across packs. A packer
may instead return a dict ``{"packs", "dropped", "oversize", "padding"}``, ``padding`` listing
the packs (by position) that repeat earlier examples on purpose.

Collator functions get the list of examples (``{"input_ids": [...]}``, or for DPO
``{"chosen_input_ids": [...], "rejected_input_ids": [...], "index": i}``) and
``max_seq_length`` (or None), and return the batch dict your collator builds: the same keys a
dumped ``.safetensors`` file has, values as ints or (nested) lists of ints. Torch tensors are
converted with ``.tolist()``.

Loss functions (``serve_loss``) get every CP rank's shard of one global batch and the CP size,
and return the loss the pipeline would report, optionally with every rank's ``(nll_sum, count)``
and the valid-token count it would log. Split functions (``serve_cp_split``) get a packed batch
and a CP size, and return every rank's ``input_ids``, ``labels`` and ``position_ids``; raising
refuses the layout.

An exception in your function is answered as ``{"error": traceback}``, which thdcheck reports
(and shrinks) as an adapter error (for ``serve_cp_split``: as a refusal). Print debugging output
to stderr, never stdout.
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


def answer(handler, line):
    """The response line to one request line: ``handler(request) -> dict`` (the payload)."""
    request = json.loads(line)
    reply = {"thdcheck": VERSION, "id": request.get("id")}
    if request.get("thdcheck") != VERSION:
        reply["error"] = "unsupported protocol version %r" % (request.get("thdcheck"),)
    else:
        try:
            reply.update(_plain(handler(request)))
        except Exception:  # reported to thdcheck, which shrinks the failing case
            reply["error"] = traceback.format_exc()
    return json.dumps(reply)


def serve(handler, stdin=None, stdout=None):
    """Answer requests until stdin closes: ``handler(request) -> dict`` (the payload)."""
    stdin = stdin or sys.stdin
    stdout = stdout or sys.stdout
    for line in stdin:
        line = line.strip()
        if not line:
            continue
        stdout.write(answer(handler, line) + "\n")
        stdout.flush()


def packer_handler(pack):
    """The handler of ``pack(lengths, capacity, seed) -> (packs, dropped)`` or ``(packs,
    dropped, oversize)``: ``oversize`` lists the examples longer than the capacity that the
    packer placed alone in a pack of their own on purpose."""

    def handler(request):
        examples = request["examples"]
        lengths = [e["len"] for e in examples]
        out = pack(lengths, request["capacity"], request["seed"])
        if isinstance(out, dict):  # {"packs", "dropped", "oversize", "padding"}
            extra = {"padding": list(out.get("padding", []))}
            out = (out["packs"], out.get("dropped", []), out.get("oversize", []))
        else:
            extra = {}
        packs, dropped = out[0], out[1]
        ids = [e["id"] for e in examples]
        def entry(x):  # an index, or a piece (index, start, end) of an example split across packs
            return ids[x] if isinstance(x, int) else [ids[x[0]], x[1], x[2]]

        reply = {
            "packs": [[entry(x) for x in p] for p in packs],
            "dropped": [ids[i] for i in dropped],
        }
        if len(out) > 2:
            reply["oversize"] = [ids[i] for i in out[2]]
        reply.update(extra)
        return reply

    return handler


def serve_packer(pack):
    """Serve ``pack(lengths, capacity, seed) -> (packs, dropped)``; ids are list indices."""
    serve(packer_handler(pack))


def collator_handler(collate):
    """The handler of ``collate(examples, max_seq_length) -> batch dict``."""

    def handler(request):
        return {"batch": collate(request["examples"], request.get("max_seq_length"))}

    return handler


def serve_collator(collate):
    """Serve ``collate(examples, max_seq_length) -> batch dict``."""
    serve(collator_handler(collate))


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

    serve(logger_handler(log))


def logger_handler(log):
    """The handler of ``log(request) -> dict`` (see ``serve_logger``)."""

    def handler(request):
        return {"logged": log(request)}

    return handler


def _float(value):
    """A float for JSON: NaN and the infinities as the strings "NaN", "Infinity", "-Infinity"
    (JSON has no NaN; thdcheck reads these strings as the values)."""
    if hasattr(value, "item"):
        value = value.item()
    value = float(value)
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "Infinity" if value > 0 else "-Infinity"
    return value


def _count(value):
    """An integer count (a tensor, or an integral float, becomes an int)."""
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def serve_loss(loss):
    """Serve ``loss(ranks, cp_size) -> loss | dict`` for ``thdcheck fuzz loss``.

    ``ranks[r]`` is CP rank ``r``'s shard of one global packed batch, in its local (zigzag)
    order: ``{"cp_rank": r, "logits": [[float] * vocab] * n, "labels": [int] * n}``. The labels
    are already rolled on the full sequence (shifted: local token ``k`` predicts ``labels[k]``);
    -100 marks a token that predicts nothing (ignored, the last token of a sequence, padding),
    so ``labels != -100`` is the loss mask. A rank may hold no valid label at all.

    Return the loss the pipeline reports, as a number, or a dict with
      - ``"loss"``: that number;
      - ``"parts"`` (optional): every rank's ``(nll_sum, count)``, rank 0 first: the Σ NLL over
        its valid labels and their number;
      - ``"n_valid_tokens"`` (optional): the valid-token count the pipeline would log.
    NaN is allowed (and reported as a violation: a loss is never NaN); tensors are converted
    with ``.item()``.
    """

    serve(loss_handler(loss))


def loss_handler(loss):
    """The handler of ``loss(ranks, cp_size)`` (see ``serve_loss``)."""

    def handler(request):
        out = loss(request["ranks"], request["cp_size"])
        if not isinstance(out, dict):
            out = {"loss": out}
        reply = {"loss": _float(out["loss"])}
        if out.get("parts") is not None:
            reply["parts"] = [{"nll": _float(n), "count": _count(c)} for n, c in out["parts"]]
        if out.get("n_valid_tokens") is not None:
            reply["n_valid_tokens"] = _count(out["n_valid_tokens"])
        return reply

    return handler


def serve_cp_split(split):
    """Serve ``split(batch, cp_size) -> [rank dict, ...]`` for ``thdcheck fuzz cp-split``.

    ``batch`` holds ``input_ids``, ``labels`` (unshifted: ``labels[t]`` is token ``t``'s own id,
    -100 for ignored tokens and padding), ``position_ids``, ``cu_seqlens`` (real lengths) and
    ``cu_seqlens_padded`` (storage slots), all lists of ints. Return one dict per CP rank, rank
    0 first: ``{"input_ids": [...], "labels": [...], "position_ids": [...]}`` (local order;
    labels shifted, so local token ``k`` predicts ``labels[k]``; ``position_ids`` may be left
    out). Tensors are converted with ``.tolist()``.

    Raising refuses the layout (``{"rejected": "<the exception>"}``): allowed only when some
    slot is not a multiple of ``2 * cp_size``; a valid layout refused is a violation.
    """

    serve(cp_split_handler(split))


def cp_split_handler(split):
    """The handler of ``split(batch, cp_size)`` (see ``serve_cp_split``)."""

    def handler(request):
        batch = {
            k: request[k]
            for k in ("input_ids", "labels", "position_ids", "cu_seqlens", "cu_seqlens_padded")
        }
        try:
            ranks = split(batch, request["cp_size"])
        except Exception as e:  # a refusal: thdcheck judges whether the layout allowed it
            return {"rejected": "".join(traceback.format_exception_only(type(e), e)).strip()}
        return {"ranks": [_plain(r) for r in ranks]}

    return handler
