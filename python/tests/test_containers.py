"""The same batch in every container a collator may return gives the same report.

The differential test that found the numpy-scalar read from freed memory (issue 24): every
committed batch (examples and the real-code corpus) through numpy arrays, numpy scalars, Python
ints, nested lists, strided and Fortran-order views, big-endian arrays, another library's
`__array_interface__` whose data is a buffer object, and (with torch installed) torch tensors
and non-contiguous torch views, on the CPU and (where torch sees one) on a GPU, gives the
verdict `thdcheck check` gives the file and the very report the plain numpy arrays give. Then
the hostile values: each raises an error that names the key or the option, never a crash, a
hang or a silent pass.
"""

from __future__ import annotations

import gc

import numpy as np
import pytest

import thdcheck
from _batches import REPO, every_file, in_memory

try:
    import torch
except ImportError:  # CI has no torch: the torch containers are skipped there
    torch = None

# Every committed batch, CP rank files included (a rank file alone has no verdict of its own in
# expected.toml, but its report must still not depend on the container: the numpy scalars of
# AReaL's rank files raised a bogus `cp_rank` error).
CASES = list(every_file(REPO / "examples/batches")) + list(every_file(REPO / "corpus/real/batches"))


class Foreign:
    """Another library's array: `__array_interface__` whose `data` is a buffer object (bytes),
    not a pointer. Reading its first byte as an address crashed the interpreter."""

    def __init__(self, a: np.ndarray) -> None:
        a = np.ascontiguousarray(a)
        self._bytes = a.tobytes()
        self.__array_interface__ = {
            "shape": a.shape,
            "typestr": a.dtype.str,
            "data": self._bytes,
            "version": 3,
        }


def _strided(a: np.ndarray):
    if a.ndim == 0:
        return a
    wide = np.repeat(a[..., None], 2, axis=-1)  # every value twice
    view = wide[..., 1]
    assert not view.flags.c_contiguous or a.size <= 1
    return view


def _big_endian(a: np.ndarray):
    return a.astype(a.dtype.newbyteorder(">")) if a.dtype.itemsize > 1 else a


def _scalars(a, scalar):
    return scalar(a) if isinstance(a, np.ndarray) and a.ndim == 0 else a


def _lists(a):
    # A list of floats is no tensor (the protocol says `schema`): float arrays stay arrays.
    return a if a.dtype.kind == "f" else a.tolist()


def _torch(a, strided=False):
    t = torch.from_numpy(np.ascontiguousarray(a))
    if strided and t.dim() > 0:
        t = torch.stack([t, t], dim=-1)[..., 1]  # every value twice, read every other one
        assert not t.is_contiguous() or t.numel() <= 1
    return t


def _torch_cuda(a, strided=False):
    # Built on the GPU as a training loop holds it; the strided view is made there too (`.to`
    # of a non-contiguous CPU view would make it contiguous on the way).
    t = torch.from_numpy(np.ascontiguousarray(a)).to("cuda")
    if strided and t.dim() > 0:
        t = torch.stack([t, t], dim=-1)[..., 1]
        assert not t.is_contiguous() or t.numel() <= 1
    return t


def _numpy_scalar(a):
    gc.collect()  # nothing else holds the temporary behind a scalar's array interface
    return a[()]


CONTAINERS = {
    "numpy": lambda a: a,
    "numpy-scalars": lambda a: _scalars(a, _numpy_scalar),
    "python-ints": lambda a: _scalars(a, lambda x: x.item()),
    "lists": _lists,
    "tuples": lambda a: tuple(_lists(a)) if a.ndim == 1 and a.dtype.kind != "f" else _lists(a),
    "strided": _strided,
    "fortran": lambda a: np.asfortranarray(a) if a.ndim == 2 else a,
    "big-endian": _big_endian,
    "foreign-buffer": Foreign,
    "torch": lambda a: _torch(a),
    "torch-strided": lambda a: _torch(a, strided=True),
    "torch-scalars": lambda a: torch.tensor(a.item()) if a.ndim == 0 else _torch(a),
    "torch-cuda": lambda a: _torch_cuda(a),
    "torch-cuda-strided": lambda a: _torch_cuda(a, strided=True),
}
TORCH = {"torch", "torch-strided", "torch-scalars"}
CUDA = {"torch-cuda", "torch-cuda-strided"}  # run where torch sees a GPU (gpu-tests/README.md)


def _report(tensors, meta, name):
    meta, profile = in_memory(meta)
    try:
        r = thdcheck.check(tensors, metadata=meta, name=name, profile=profile)
        return sorted(r.violated), str(r)
    except thdcheck.BatchError as e:
        return ["error"], str(e)


@pytest.mark.parametrize("container", sorted(CONTAINERS))
def test_every_committed_batch_in_every_container_gets_the_commands_report(container):
    if container in TORCH | CUDA and torch is None:
        pytest.skip("torch is not installed")
    if container in CUDA and not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    wrap = CONTAINERS[container]
    differ = []
    for rel, tensors, meta, want in CASES:
        verdict, text = _report(tensors, meta, rel)
        if want is not None:
            assert verdict == want, (rel, verdict, want)  # the command's verdict (expected.toml)
        held = {k: wrap(v) for k, v in tensors.items()}
        # Churn the allocator between building the containers and reading them: memory freed
        # behind the binding's back is reused by these arrays.
        churn = [np.full(16, 7, dtype=np.int64) for _ in range(64)]
        got_verdict, got_text = _report(held, meta, rel)
        del churn
        if (got_verdict, got_text) != (verdict, text):
            differ.append((rel, verdict, got_verdict, got_text[:300]))
    assert not differ, f"{len(differ)} of {len(CASES)} batches differ as {container}: {differ[:3]}"


def _hf(**over):
    batch = {
        "input_ids": np.array([[5, 6, 7, 8, 9]]),
        "labels": np.array([[-100, 6, 7, -100, 9]]),
        "position_ids": np.array([[0, 1, 2, 0, 1]]),
        "cu_seq_lens_q": np.array([0, 3, 5], dtype=np.int32),
        "cu_seq_lens_k": np.array([0, 3, 5], dtype=np.int32),
    }
    batch.update(over)
    return batch


def test_numpy_scalars_are_read_as_the_ints_they_hold():
    # Fails max-seqlen with Python ints; it passed with numpy scalars read from freed memory.
    as_ints = thdcheck.check(_hf(max_length_q=1, max_length_k=5))
    for _ in range(20):
        as_np = thdcheck.check(_hf(max_length_q=np.int64(1), max_length_k=np.int64(5)))
        assert as_np.violated == as_ints.violated == ["max-seqlen"], (as_np, as_ints)
    assert thdcheck.check(_hf(max_length_q=np.int32(3), max_length_k=np.int32(3))).ok


def test_an_array_interface_whose_data_is_a_buffer_is_read_not_dereferenced():
    batch = _hf()
    batch["cu_seq_lens_q"] = Foreign(np.array([0, 3, 5], dtype=np.int32))
    assert thdcheck.check(batch).ok
    batch["cu_seq_lens_q"] = Foreign(np.array([0, 3, 9], dtype=np.int32))
    # Read (its values are those of the buffer): offsets past the tokens, the `offsets` rule's.
    r = thdcheck.check(batch)
    assert r.violated == ["offsets"] and "cu_seq_lens_q[2] = 9" in str(r), str(r)
    short = Foreign(np.array([0], dtype=np.int32))
    short.__array_interface__["shape"] = (3,)  # 12 bytes claimed over 4: numpy alone reads past
    batch["cu_seq_lens_q"] = short
    with pytest.raises(thdcheck.BatchError, match="`cu_seq_lens_q`: .*smaller"):
        thdcheck.check(batch)


@pytest.mark.parametrize(
    "value,match",
    [
        ([0.0, 3.0, 9.0], r"`cu_seq_lens_q`\[0\] = 0\.0: a float"),
        ([0, 3, 9.5], r"`cu_seq_lens_q`\[2\] = 9\.5: a float"),
        ([0, None, 5], r"`cu_seq_lens_q`\[1\] = None"),
        ([0, "3", 5], r"`cu_seq_lens_q`\[1\] = '3'"),
        ([[0, 3], [5]], r"`cu_seq_lens_q`: ragged"),
        ([0, [3], 5], r"`cu_seq_lens_q`: ragged"),
        (5.0, r"`cu_seq_lens_q` = 5\.0: a float"),
        ([0, 3, 2**63], r"`cu_seq_lens_q`\[2\] = 9223372036854775808: does not fit int64"),
        (-(2**63) - 1, r"`cu_seq_lens_q` = -9223372036854775809: does not fit int64"),
    ],
)
def test_values_no_tensor_holds_are_batch_errors_naming_the_key(value, match):
    # The subprocess protocol calls each of these `schema`; they were dropped and the batch
    # passed (a cu_seq_lens_q ending past the tokens passed as floats).
    with pytest.raises(thdcheck.BatchError, match=match):
        thdcheck.check(_hf(cu_seq_lens_q=value))


def test_strings_and_none_are_skipped_as_the_protocol_skips_them():
    r = thdcheck.check(_hf(note="text", prompts=["a", "b"], nested=[["a"], ["b"]], nothing=None, d={"x": 1}))
    assert r.ok


def test_a_self_referencing_list_is_an_error_not_a_hang():
    a: list = []
    a.append(a)
    with pytest.raises(thdcheck.BatchError, match="`labels`: a list that contains itself"):
        thdcheck.check(_hf(labels=a))
    b: list = [1, 2]
    b.append(b)
    with pytest.raises(thdcheck.BatchError, match="labels"):
        thdcheck.check(_hf(labels=b))
    c: list = []
    c.extend([c, c])  # doubles at every level: found at the second, before memory grows
    with pytest.raises(thdcheck.BatchError, match="contains itself"):
        thdcheck.check(_hf(labels=c))
    deep: list = [0]
    for _ in range(40):
        deep = [deep]
    with pytest.raises(thdcheck.BatchError, match="nested more than 32 deep"):
        thdcheck.check(_hf(labels=deep))


@pytest.mark.parametrize(
    "options,error,match",
    [
        ({"cp_size": -1}, ValueError, r"cp_size=-1: expected 1\.\.=65536"),
        ({"cp_size": 2**64}, ValueError, r"cp_size=18446744073709551616"),
        ({"cp_size": "2"}, TypeError, r"cp_size='2': expected an integer"),
        ({"pad_token_id": 2**63}, ValueError, r"pad_token_id="),
        ({"pad_to_multiple_of": 0}, ValueError, r"pad_to_multiple_of=0"),
        ({"map": [("a", "b")]}, TypeError, r"map=\[\('a', 'b'\)\]: expected a dict"),
        ({"map": {"a": 1}}, TypeError, r"map: 'a': 1"),
        ({"metadata": "x"}, TypeError, r"metadata='x': expected a dict"),
        ({"profile": 3}, TypeError, r"profile=3: expected a built-in profile name"),
            ({"profile": "nope"}, ValueError, r"\"nope\" is no built-in profile"),
            ({"profile": {"name": "x", "padding_segments": "some"}}, ValueError, r"profile=: unknown variant `some`, expected one of `none`, `per-row`, `any`"),
    ],
)
def test_bad_options_raise_errors_naming_the_option(options, error, match):
    with pytest.raises(error, match=match):
        thdcheck.check(_hf(), **options)


def test_numpy_integer_options_are_ints():
    assert thdcheck.check(_hf(), cp_size=np.int64(1), pad_token_id=np.int32(0)).ok


def test_torch_hostile_tensors_name_the_key():
    if torch is None:
        pytest.skip("torch is not installed")
    with pytest.raises(thdcheck.BatchError, match="`labels`: a meta tensor"):
        thdcheck.check(_hf(labels=torch.empty(1, 5, dtype=torch.int64, device="meta")))
    sparse = torch.tensor([[-100, 6, 7, -100, 9]]).to_sparse()
    with pytest.raises(thdcheck.BatchError, match="`labels`: a torch.sparse_coo tensor"):
        thdcheck.check(_hf(labels=sparse))
    nested = torch.nested.nested_tensor([torch.arange(3), torch.arange(2)])
    with pytest.raises(thdcheck.BatchError, match="`labels`: a nested tensor"):
        thdcheck.check(_hf(labels=nested))


def test_unsigned_tensors_are_read_alike_in_numpy_and_torch():
    ids = np.array([[5, 6, 7, 8, 9]], dtype=np.uint16)
    want = thdcheck.check(_hf(input_ids=ids))
    assert want.ok
    if torch is None:
        pytest.skip("torch is not installed")
    for dt in (torch.uint16, torch.uint32, torch.uint64):
        got = thdcheck.check(_hf(input_ids=torch.tensor([[5, 6, 7, 8, 9]]).to(dt)))
        assert str(got) == str(want), dt
