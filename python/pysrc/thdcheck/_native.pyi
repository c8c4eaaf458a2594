"""Type stubs of the PyO3 extension under `thdcheck` (use the `thdcheck` functions instead)."""

from typing import Any, Callable, Mapping, Sequence

__version__: str

class BatchError(ValueError):
    """The batch cannot be read or understood; the message names the key, index and value."""

def check(
    tensors: Sequence[tuple[str, str, Sequence[int], Any]],
    *,
    name: str,
    metadata: Mapping[str, str],
    dialect: str | None = ...,
    map: Sequence[tuple[str, str]] | None = ...,
    labels: str | None = ...,
    sentinel: int = ...,
    position_base: int | None = ...,
    pad_token_id: int | None = ...,
    ignore_index: int | None = ...,
    profile: str | None = ...,
    objective: str | None = ...,
    cp_size: int | None = ...,
    pad_to_multiple_of: int | None = ...,
    causal: bool = ...,
    mlm: bool = ...,
) -> tuple[str, str, list[str], Picture]: ...

class Picture:
    """A report's picture, drawn when asked (`Report._repr_html_`)."""
    def html(self) -> str: ...

def fuzz_html(report: str) -> str:
    """The HTML of a fuzz run's JSON report (`FuzzResult`, `FuzzFailure`)."""

def resolved_profile(profile: str | None = ..., profile_json: str | None = ...) -> tuple[bool, str] | None:
    """(True, name) for a built-in profile, (False, the whole profile as TOML) for any other,
    None when neither the arguments nor the project's pyproject.toml name one."""

def fuzz(argv: Sequence[str], answer: Callable[[str], str]) -> str: ...
def metrics(
    argv: Sequence[str],
    batches: Sequence[tuple[str, Sequence[tuple[str, str, Sequence[int], Any]], Mapping[str, str]]],
) -> str: ...

# The bug zoo, for bench/zoo_vs_hypothesis.py (private; not part of the package's API).
def zoo_variants() -> list[dict[str, Any]]: ...
def zoo_search(name: str, seed: int, cases: int) -> dict[str, Any]: ...
def zoo_judge(name: str, case_json: str) -> str | None: ...
def zoo_judge_reference(name: str, case_json: str) -> str | None: ...
def zoo_size(name: str, case_json: str) -> dict[str, int]: ...
