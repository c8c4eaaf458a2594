"""thdcheck.check gives every committed batch the verdict `thdcheck check` gives its file."""

from __future__ import annotations

import numpy as np
import pytest

import thdcheck
from _batches import REPO, cases, in_memory

EXAMPLES = list(cases(REPO / "examples/batches"))
REAL = list(cases(REPO / "corpus/real/batches"))


def _verdict(tensors, meta, name):
    # What the tensors cannot say travels as metadata, exactly as in the file (a profile file
    # beside it as `profile=`: a batch in memory names built-in profiles only).
    meta, profile = in_memory(meta)
    try:
        return sorted(thdcheck.check(tensors, metadata=meta, name=name, profile=profile).violated)
    except thdcheck.BatchError:
        return ["error"]


@pytest.mark.parametrize("rel,tensors,meta,want", EXAMPLES, ids=[c[0] for c in EXAMPLES])
def test_example_batches_get_the_commands_verdict(rel, tensors, meta, want):
    assert _verdict(tensors, meta, rel) == want


@pytest.mark.parametrize("rel,tensors,meta,want", REAL, ids=[c[0] for c in REAL])
def test_real_corpus_batches_get_the_commands_verdict(rel, tensors, meta, want):
    assert _verdict(tensors, meta, rel) == want


def test_the_corpora_are_read():
    assert len(EXAMPLES) >= 20 and len(REAL) >= 80, (len(EXAMPLES), len(REAL))


def test_report_text_outcomes_and_dict():
    batch = {
        "input_ids": np.array([[5, 6, 7, 8, 9]], dtype=np.int32),
        "labels": np.array([[-100, 6, 7, -100, 9]]),
        "position_ids": np.array([[0, 1, 2, 3, 4]]),
        "cu_seq_lens_q": np.array([0, 3, 5], dtype=np.int32),
    }
    r = thdcheck.check(batch)
    assert not r.ok and r.violated == ["position-ids"]
    text = str(r)
    assert text.startswith("batch  [hf · ") and "VIOLATED position-ids" in text, text
    assert text.rstrip().endswith("=> FAIL: position-ids violated"), text
    bad = [o for o in r.outcomes if o.violated]
    assert [o.rule for o in bad] == ["position-ids"]
    o = bad[0]
    assert (o.invariant, o.location.get("segment"), o.location.get("token")) == ("LAYOUT", 1, 3)
    assert (o.expected, o.got) == ("0", "3")
    assert r.to_dict()["packs"][0]["facts"]["tokens"] == 5
    batch["position_ids"] = np.array([[0, 1, 2, 0, 1]])
    ok = thdcheck.check(batch)
    assert ok.ok and bool(ok) and "=> PASS" in str(ok)


def test_lists_and_ints_as_a_collator_returns_them():
    # transformers' DataCollatorWithFlattening(return_tensors="np") minus numpy: plain lists.
    batch = {
        "input_ids": [[5, 6, 7, 8, 9]],
        "labels": [[-100, 6, 7, -100, 9]],
        "position_ids": [[0, 1, 2, 0, 1]],
        "cu_seq_lens_q": [0, 3, 5],
        "max_length_q": 3,
        "note": "not a tensor",  # skipped, as a dump skips it
    }
    assert thdcheck.check(batch).ok
    batch["max_length_q"] = 2
    assert thdcheck.check(batch).violated == ["max-seqlen"]


def test_int32_and_non_contiguous_arrays():
    ids = np.arange(20, dtype=np.int64).reshape(2, 10)[:, ::2]  # a strided view
    batch = {"input_ids": ids, "cu_seq_lens_q": np.array([0, 4, 10], dtype=np.int32)}
    r = thdcheck.check(batch)
    assert r.to_dict()["packs"][0]["facts"]["tokens"] == 10


def test_bad_input_raises_a_value_error_naming_key_index_and_value():
    batch = {"input_ids": np.arange(6), "seq_lens": np.array([[3, -5]])}
    with pytest.raises(thdcheck.BatchError) as e:
        thdcheck.check(batch, name="mb0")
    assert isinstance(e.value, ValueError)
    msg = str(e.value)
    assert msg.startswith("mb0: ") and "seq_lens" in msg and "[1]" in msg and "-5" in msg, msg
    # Offsets that contradict the batch are its `offsets` violation, as the command reports them.
    r = thdcheck.check({"input_ids": np.arange(6), "cu_seq_lens_q": np.array([0, 4, 3, 6], dtype=np.int32)})
    assert r.violated == ["offsets"] and "cu_seq_lens_q[2] = 3" in str(r), str(r)
    with pytest.raises(thdcheck.BatchError, match="input_ids"):
        thdcheck.check({"input_ids": np.zeros(4, dtype=np.float32), "cu_seq_lens_q": [0, 4]})
    with pytest.raises(ValueError, match="profile"):
        thdcheck.check({"input_ids": [1], "cu_seq_lens_q": [0, 1]}, profile="nope")
    with pytest.raises(thdcheck.BatchError, match="dict"):
        thdcheck.check([1, 2, 3])


def test_assert_batch_ok_raises_with_the_report():
    good = {"input_ids": [[1, 2, 3]], "cu_seq_lens_q": [0, 3], "position_ids": [[0, 1, 2]]}
    assert thdcheck.assert_batch_ok(good).ok
    bad = dict(good, position_ids=[[0, 1, 5]])
    with pytest.raises(AssertionError) as e:
        thdcheck.assert_batch_ok(bad)
    assert "position-ids violated" in str(e.value) and "expected: " not in str(e.value).split("\n")[0]
    assert "VIOLATED position-ids" in str(e.value)


def test_options_are_the_commands():
    # OLMo-core: labels across documents are its objective's; stated SFT, they are a leak.
    batch = {
        "input_ids": np.array([[5, 6, 2, 7, 8, 2]]),
        "doc_lens": np.array([[3, 3]]),
        "max_doc_lens": [3],
    }
    assert thdcheck.check(batch).ok
    assert thdcheck.check(batch, objective="sft").violated == ["cross-doc-label"]
    assert thdcheck.check({"input_ids": [[1, 2, 3]], "cu_seq_lens_q": [0, 3]}, pad_to_multiple_of=4).violated == ["pad-multiple"]


def test_torch_tensors_when_torch_is_installed():
    torch = pytest.importorskip("torch")
    batch = {
        "input_ids": torch.tensor([[5, 6, 7, 8, 9]], dtype=torch.int32),
        "labels": torch.tensor([[-100, 6, 7, -100, 9]]),
        "position_ids": torch.tensor([[0, 1, 2, 0, 1]]),
        "cu_seq_lens_q": torch.tensor([0, 3, 5], dtype=torch.int32),
    }
    assert thdcheck.check(batch).ok
    batch["position_ids"] = torch.tensor([[0, 1, 2, 3, 4]]).t().contiguous().t()  # non-contiguous
    assert thdcheck.check(batch).violated == ["position-ids"]


def test_a_batch_no_rule_applied_to_is_unchecked_never_a_pass():
    # Offsets that hold no document: every rule is skipped, as `thdcheck check` says UNCHECKED.
    r = thdcheck.check({"input_ids": [[1, 2, 3, 4]], "cu_seq_lens_q": [0]})
    assert r.ok and not r.checked and "UNCHECKED" in str(r) and "UNCHECKED" in repr(r), str(r)
    with pytest.raises(AssertionError, match="no rule applied"):
        thdcheck.assert_batch_ok({"input_ids": [[1, 2, 3, 4]], "cu_seq_lens_q": [0]})
    assert thdcheck.check({"input_ids": [[1, 2, 3]], "cu_seq_lens_q": [0, 3], "position_ids": [[0, 1, 2]]}).checked
