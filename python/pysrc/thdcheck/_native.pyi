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
) -> tuple[str, str, list[str]]: ...

def fuzz(argv: Sequence[str], answer: Callable[[str], str]) -> str: ...
def metrics(
    argv: Sequence[str],
    batches: Sequence[tuple[str, Sequence[tuple[str, str, Sequence[int], Any]], Mapping[str, str]]],
) -> str: ...

