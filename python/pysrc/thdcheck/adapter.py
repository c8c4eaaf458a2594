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

Before each call of your function on a request with a ``seed`` (the packer requests), the global
RNGs are seeded from it: Python's ``random``, and numpy's and torch's if already imported (see
``seed_globals``), so a shuffle on the global ``random`` replays.

An exception in your function is answered as ``{"error": traceback}``, which thdcheck reports
(and shrinks) as an adapter error (for ``serve_cp_split``: as a refusal). Print debugging output
to stderr, never stdout.
"""

import json
import operator
import sys
import traceback

VERSION = 1
VERSIONS = (1, 2)  # 2: a packer session (push / end_epoch / finish)
# Request keys that configure a packer, passed to its function as keyword arguments when set.
PACKER_OPTIONS = ("pad_to_multiple_of", "max_seqs_per_pack", "dp_size", "min_packs")


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


def seed_globals(request):
    """Seed the global RNGs from the request's ``seed``, when it has one (packer requests do; in
    a session, ``start``): Python's ``random``, and numpy's and torch's when the adapter has
    already imported them (never imported here). A function that shuffles with the global
    ``random`` then answers the same request the same way, as thdcheck's replay and its
    ``packer-deterministic`` check expect. An RNG of the function's own (``random.Random()``)
    is not touched."""
    seed = request.get("seed")
    if isinstance(seed, bool) or not isinstance(seed, int):
        return
    import random

    random.seed(seed)
    numpy = sys.modules.get("numpy")
    if numpy is not None and hasattr(numpy, "random"):
        numpy.random.seed(seed % 2**32)
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "manual_seed"):
        torch.manual_seed(seed % 2**64)


def answer(handler, line):
    """The response line to one request line: ``handler(request) -> dict`` (the payload).

    The answer carries the request's protocol version: 1, or 2 for a packer session."""
    request = json.loads(line)
    version = request.get("thdcheck")
    reply = {"thdcheck": version if version in VERSIONS else VERSION, "id": request.get("id")}
    if version not in VERSIONS:
        reply["error"] = "unsupported protocol version %r" % (version,)
    else:
        try:
            seed_globals(request)
            reply.update(_plain(handler(request)))
        except Rejected as e:  # a refusal the function declared (``rejects=``)
            reply["rejected"] = "%s: %s" % (type(e.cause).__name__, e.cause)
        except Invalid as e:  # an answer the protocol cannot carry: thdcheck's `schema`
            reply["invalid"] = str(e)
        except Exception:  # reported to thdcheck, which shrinks the failing case
            reply["error"] = traceback.format_exc()
    return json.dumps(reply)


class Invalid(Exception):
    """The function's answer cannot be stated in the protocol (an index outside the request's
    examples): answered as ``{"invalid": why}``, which thdcheck reports as a ``schema`` fault."""


class Rejected(Exception):
    """A packer refused its input with an exception it declares (``rejects=``)."""

    def __init__(self, cause):
        super().__init__(str(cause))
        self.cause = cause


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


def _lengths(examples):
    """Example lengths: an int, or ``(chosen, rejected)`` for a DPO pair (``--pairs``)."""
    return [e["len"] if "len" in e else (e["chosen"], e["rejected"]) for e in examples]


def _options(request):
    """The packer options a request sets (``--pad-to-multiple-of``, ...), as keyword arguments."""
    return {k: request[k] for k in PACKER_OPTIONS if request.get(k) is not None}


def _reply(out, entry):
    """A packer's answer as the protocol's reply; ``entry`` maps what the packer returned (an
    index or an id) to an id. ``out`` is ``(packs, dropped[, oversize])`` or a dict with any of
    ``packs``, ``dropped``, ``oversize``, ``padding``, ``ranks``, ``pending``."""
    if not isinstance(out, dict):
        out = {"packs": out[0], "dropped": out[1], **({"oversize": out[2]} if len(out) > 2 else {})}

    def item(x):  # an example, or a piece (example, start, end) of one split across packs
        return entry(x) if hasattr(x, "__index__") else [entry(x[0]), x[1], x[2]]

    reply = {"packs": [[item(x) for x in p] for p in out.get("packs", [])]}
    for key in ("dropped", "oversize"):
        if key in out:
            reply[key] = [entry(i) for i in out[key]]
    for key in ("padding", "ranks", "pending"):
        if key in out:
            reply[key] = out[key]
    return reply


def packer_handler(pack, rejects=()):
    """The handler of ``pack(lengths, capacity, seed, **options) -> (packs, dropped)``.

    ``lengths[i]`` is example ``i``'s length (``(chosen, rejected)`` for a pair); packs hold
    indices, or pieces ``(index, start, end)``. The answer may be ``(packs, dropped,
    oversize)`` or a dict (see ``_reply``). ``options`` are the packer options the request sets
    (``pad_to_multiple_of``, ``max_seqs_per_pack``, ``dp_size``, ``min_packs``). An exception
    of a type in ``rejects`` is answered as a refusal (``{"rejected": ...}``), which thdcheck
    accepts only for a request with an example longer than the capacity."""

    def handler(request):
        if "op" in request:
            raise ValueError("a packer session request (%r) sent to a one-shot packer (serve_packer): "
                             "serve it with serve_packer_session, or fuzz without --session" % request["op"])
        examples = request["examples"]
        ids = [e["id"] for e in examples]
        try:
            out = pack(_lengths(examples), request["capacity"], request["seed"], **_options(request))
        except tuple(rejects) as e:
            raise Rejected(e) from e
        return _reply(out, lambda i: ids[_index(i, len(ids))])

    return handler


def _index(i, n):
    """``i`` as an index into the request's ``n`` examples; a negative or too large one (which
    Python's ``ids[i]`` would wrap or raise on) is an invalid answer."""
    try:
        k = operator.index(i)
    except TypeError:
        raise Invalid("the packer answered %r where an example index belongs" % (i,)) from None
    if isinstance(i, bool) or not 0 <= k < n:
        raise Invalid("the packer answered index %r; the request has %d examples (indices 0..%d)"
                      % (i, n, n - 1))
    return k


def serve_packer(pack, rejects=()):
    """Serve ``pack(lengths, capacity, seed, **options) -> (packs, dropped)``; ids are list
    indices."""
    serve(packer_handler(pack, rejects))


def packer_session_handler(start, rejects=()):
    """The handler of a packer session (protocol version 2, ``thdcheck fuzz packer --session``).

    ``start(capacity, seed, **options)`` returns the packer, an object with ``push(examples)``,
    ``end_epoch()`` (optional) and ``finish()``. ``examples`` are dicts ``{"id", "len"}`` (or
    ``{"id", "chosen", "rejected"}``); each method returns the packs it emits now, of example ids
    (or pieces ``(id, start, end)``), as a list of packs or a dict as ``packer_handler``'s
    (``pending``: how many examples it still holds, for ``finish``). An exception of a type in
    ``rejects`` is a refusal."""
    state = {}

    def handler(request):
        op = request.get("op")
        if op not in ("start", "push", "end_epoch", "finish"):
            raise ValueError("a one-shot packer request (op %r) sent to a packer session "
                             "(serve_packer_session): fuzz with --session, or serve it with "
                             "serve_packer" % (op,))
        if op != "start" and "packer" not in state:
            raise ValueError("op %r before the session's start" % (op,))
        try:
            if op == "start":
                state["packer"] = start(request["capacity"], request["seed"], **_options(request))
                return {}
            packer = state["packer"]
            if op == "push":
                out = packer.push(request["examples"])
            elif op == "end_epoch":
                out = packer.end_epoch() if hasattr(packer, "end_epoch") else []
            else:
                out = packer.finish()
        except tuple(rejects) as e:
            raise Rejected(e) from e
        if isinstance(out, list):
            out = {"packs": out}
        return _reply(out, lambda i: i)

    return handler


def serve_packer_session(start, rejects=()):
    """Serve a streaming packer: ``start(capacity, seed, **options)`` returns an object with
    ``push(examples)``, ``end_epoch()`` and ``finish()`` (see ``packer_session_handler``)."""
    serve(packer_session_handler(start, rejects))


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
      - ``"n_valid_tokens"`` (optional): the valid-token count the pipeline would log;
      - ``"dtype"`` (optional): ``"float32"`` or ``"float64"``, what the loss was computed in:
        a float32 loss is judged to DESIGN.md's f32 tolerance (rtol 1e-5) unless ``--rtol``
        says otherwise. A tensor (or numpy scalar) returned as the loss declares its own.
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
        dtype = out.get("dtype", getattr(out["loss"], "dtype", None))
        if dtype is not None:
            reply["dtype"] = str(dtype).removeprefix("torch.")
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


def serve_attention(attend):
    """Serve ``attend(batch) -> out | (out, lse) | dict`` for ``thdcheck fuzz attention``.

    ``batch`` is the request: ``dtype`` (``"f32"``, ``"bf16"``, ``"f16"``: every value of q, k
    and v is exactly representable in it), ``causal``, ``heads``, ``kv_heads``, ``head_dim``,
    ``cu_seqlens`` (real lengths), ``cu_seqlens_padded`` (storage slots: a document's real tokens
    first, then its padding), ``max_seqlen`` and ``position_ids`` (each token's offset in its
    slot), and ``q`` (``[T][heads][head_dim]``), ``k`` and ``v`` (``[T][kv_heads][head_dim]``).
    The scale is ``1 / sqrt(head_dim)``.

    Return the output ``[T][heads][head_dim]`` (a tensor or nested lists), or ``(out, lse)``
    with the log-sum-exp ``[T][heads]`` (natural log of the scaled scores' Σ exp over the keys a
    query sees), or ``{"out": ..., "lse": ...}``. Padding rows may hold anything finite.

    With ``--cp-size N`` the request has no ``q``, ``k``, ``v`` but ``cp_size``, ``cp_layout``
    (``"zigzag"``) and ``ranks``: every rank's shard ``{"cp_rank", "position_ids", "q", "k",
    "v"}`` (rank ``r`` holds chunks ``r`` and ``2N−1−r`` of every slot); return one answer per
    rank, rank 0 first, each as above.
    """

    serve(attention_handler(attend))


def _attention_answer(out):
    """``out``, ``(out, lse)`` or ``{"out", "lse"}`` as the protocol's answer."""
    if isinstance(out, dict):
        reply = {"out": _plain(out["out"])}
        if out.get("lse") is not None:
            reply["lse"] = _plain(out["lse"])
        return reply
    if isinstance(out, tuple):
        return {"out": _plain(out[0]), "lse": _plain(out[1])}
    return {"out": _plain(out)}


def attention_handler(attend):
    """The handler of ``attend(batch)`` (see ``serve_attention``)."""

    def handler(request):
        out = attend(request)
        if request.get("ranks") is not None:
            return {"ranks": [_attention_answer(r) for r in out]}
        return _attention_answer(out)

    return handler
