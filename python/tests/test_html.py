"""Notebooks: `Report`, `FuzzFailure`, `FuzzResult` and `GuardViolation` show the picture that
`check --html` draws (`_repr_html_`); the plain text stays their `repr`."""

import xml.dom.minidom

import pytest

import thdcheck


def _cross_doc_batch():
    # Two documents of 3 and 2 tokens; the label at token 3 is the next document's first token.
    return {
        "input_ids": [[5, 6, 7, 8, 9]],
        "labels": [[-100, 6, 7, 8, 9]],
        "position_ids": [[0, 1, 2, 0, 1]],
        "cu_seq_lens_q": [0, 3, 5],
    }


def test_report_html_shows_the_violation_at_its_token():
    report = thdcheck.check(_cross_doc_batch())
    assert not report.ok
    html = report._repr_html_()
    assert "<svg" in html and "cross-doc-label [token 3]" in html
    assert "FAIL: cross-doc-label violated" in html
    # Well-formed, and self-contained: nothing fetched.
    xml.dom.minidom.parseString(html)
    assert "<script" not in html and "https://" not in html
    # The plain text stays the default repr.
    assert repr(report).startswith("<thdcheck.Report FAIL")


def test_guard_violation_html_is_its_report():
    guarded = thdcheck.guard(lambda batch: batch)
    with pytest.raises(thdcheck.GuardViolation) as e:
        guarded(_cross_doc_batch())
    assert "cross-doc-label [token 3]" in e.value._repr_html_()


def test_fuzz_html_draws_the_shrunk_request_and_answer():
    def drops_overflow(lengths, capacity, seed, **options):
        packs, used = [[]], 0
        for i, n in enumerate(lengths):
            if used + n > capacity:
                break  # the rest are lost: neither packed nor reported dropped
            packs[0].append(i)
            used += n
        return {"packs": [p for p in packs if p]}

    with pytest.raises(thdcheck.FuzzFailure) as e:
        thdcheck.fuzz_packer(drops_overflow, cases=32)
    html = e.value._repr_html_()
    # Shrunk to one example longer than the capacity, lost: the request drawn, no pack.
    assert "request: 1 example, capacity 1" in html and "<svg" in html
    assert "packer-conservation: example 0" in html
    xml.dom.minidom.parseString(html)

    def whole(lengths, capacity, seed, **options):
        return {"packs": [[i] for i in range(len(lengths))]}

    result = thdcheck.fuzz_packer(whole, cases=8, fitting_only=True)
    assert "8 cases passed" in result._repr_html_()
