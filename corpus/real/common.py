"""Shared plumbing of the real-code corpus generator (run by hand, never in CI).

Upstream code is never copied into this repository: `upstream()` reads each file with
`git show COMMIT:PATH` from a local mirror of the upstream repository (the session tool
`fetch` makes them under /work/.mirror/OWNER+NAME/repo; `--mirrors` points elsewhere), writes it
to a scratch directory and imports it from there. Each case then saves what the real function
returned, under the stack's own key names, with a JSON record of where it came from.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import types
from pathlib import Path

MIRRORS = Path(os.environ.get("THDCHECK_MIRRORS", "/work/.mirror"))
SCRATCH = Path(tempfile.mkdtemp(prefix="thdcheck-corpus-"))
OUT = Path(__file__).resolve().parent / "batches"
# Batches in a format the reader does not support yet (a 4-D mask, EOS-delimited documents,
# contiguous CP shards, targets under a separate loss-mask key, key names that need `--map`):
# saved the same way, outside the CI gate, until thdcheck can read them.
PENDING = Path(__file__).resolve().parent / "pending"

# The check ids a record may expect (docs/batch-files.md), plus "error" (unreadable, exit 2).
CHECK_IDS = {
    "padded-slots", "qk-offsets", "row-slots", "max-seqlen", "position-ids", "cross-doc-label",
    "pad-labels", "mask", "seq-idx", "mock-marked", "label-targets", "pad-multiple", "cp-shard",
    "dpo-offsets", "dpo-concat", "error",
    # ids the tool reports that docs/batch-files.md does not list yet (rules::checks::check_batch, rules/src/checks/rules.rs)
    "offsets", "token-counts", "num-real-seqs", "mock-nonempty", "eos-delimited",
}


def mirror(repo: str) -> Path:
    """The git directory of `owner/name`'s mirror."""
    path = MIRRORS / repo.replace("/", "+") / "repo"
    if not path.exists():
        sys.exit(f"no mirror of {repo} at {path}: fetch it (github:{repo}) or set THDCHECK_MIRRORS")
    return path


def full_sha(repo: str, commit: str) -> str:
    """The 40-digit id of `commit` (which may be `abc123^`); a `pypi:NAME==VERSION` source (code
    run from an installed release, such as transformers) is returned as given."""
    if commit.startswith("pypi:"):
        return commit
    out = subprocess.run(
        ["git", "-C", str(mirror(repo)), "rev-parse", f"{commit}^{{commit}}"],
        check=True, capture_output=True, text=True,
    )
    return out.stdout.strip()


def source(repo: str, commit: str, path: str) -> str:
    """The text of `path` at `commit` in `repo`."""
    out = subprocess.run(
        ["git", "-C", str(mirror(repo)), "show", f"{commit}:{path}"],
        check=True, capture_output=True, text=True,
    )
    return out.stdout


def upstream(repo: str, commit: str, path: str, name: str | None = None,
             stubs: dict[str, types.ModuleType] | None = None, prelude: str = "") -> types.ModuleType:
    """Imports `path` of `repo` at `commit` as a fresh module.

    `stubs` are installed in `sys.modules` first (for heavy imports the function under test
    does not use: megatron, transformer_engine, ...). `prelude` is prepended to the source only
    where an import cannot be stubbed; the record says so.
    """
    for mod_name, mod in (stubs or {}).items():
        sys.modules[mod_name] = mod
    text = prelude + source(repo, commit, path)
    sha = full_sha(repo, commit)
    mod_name = name or f"upstream_{repo.replace('/', '_').replace('-', '_')}_{sha[:9]}_{Path(path).stem}"
    file = SCRATCH / sha[:12] / path
    file.parent.mkdir(parents=True, exist_ok=True)
    file.write_text(text)
    spec = importlib.util.spec_from_file_location(mod_name, file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = module
    spec.loader.exec_module(module)
    return module


def stub(name: str, **attrs) -> types.ModuleType:
    """A module named `name` holding `attrs` (for `upstream(stubs=...)`)."""
    mod = types.ModuleType(name)
    for k, v in attrs.items():
        setattr(mod, k, v)
    return mod


def _jsonable(value):
    import torch

    if isinstance(value, torch.Tensor):
        return {"dtype": str(value.dtype).removeprefix("torch."), "shape": list(value.shape),
                "data": value.tolist()}
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (int, float, str, bool)) or value is None:
        return value
    return repr(value)


RECORDS: list[dict] = []


def save_case(stack: str, case: str, batch: dict, *, repo: str, commit: str, file: str,
              function: str, input, expected, why: str, bug: str | None = None,
              metadata: dict[str, str] | None = None, notes: str = "",
              stubs: list[str] | None = None, pending: str | None = None) -> Path:
    """Writes `batches/STACK/CASE.safetensors` (the tensors of `batch`, as the stack returned
    them) and `batches/STACK/CASE.json` (where it came from and what verdict it must get).

    `expected` is "pass", "error", or the list of check ids the bug must violate. It comes from
    the stack's contract and the input (`why` says how), never from thdcheck's output.
    `metadata` holds what the stack's configuration knows and the tensors do not
    (`cp_size`, `pad_to_multiple_of`, `causal`, `pad_token_id`, ...), as a user would state it.
    `pending` (the format or option the reader lacks) saves the case under `pending/` instead of
    `batches/`, outside the CI gate; the record keeps the reason.
    """
    import torch
    from safetensors.torch import save_file

    if expected != "pass":
        bad = set(expected if isinstance(expected, list) else [expected]) - CHECK_IDS
        assert not bad, f"{stack}/{case}: unknown check ids {bad}"
    tensors = {}
    dropped = []
    for k, v in batch.items():
        if isinstance(v, torch.Tensor):
            tensors[k] = v.detach().clone().contiguous()
        elif isinstance(v, bool):
            tensors[k] = torch.tensor(v)
        elif isinstance(v, int):
            tensors[k] = torch.tensor(v)
        else:
            dropped.append(k)
    path = (PENDING if pending else OUT) / stack / f"{case}.safetensors"
    path.parent.mkdir(parents=True, exist_ok=True)
    meta = {k: str(v) for k, v in (metadata or {}).items()}
    place_profile(stack, path.parent, meta.get("profile", ""))
    save_file(tensors, str(path), metadata=meta or None)
    record = {
        "case": f"{stack}/{case}",
        "path": f"{stack}/{case}.safetensors",
        "repo": repo,
        "commit": full_sha(repo, commit),
        "commit_as_given": commit,
        "file": file,
        "function": function,
        "input": _jsonable(input),
        "expected": expected,
        "why": why,
        "bug": bug,
        "metadata": meta,
        "keys_not_saved": dropped,
        "stubs": stubs or [],
        "notes": notes,
        **({"pending": pending} if pending else {}),
        "output": _jsonable({k: v for k, v in tensors.items()}),
        "versions": versions(),
    }
    path.with_suffix(".json").write_text(json.dumps(record, indent=1) + "\n")
    RECORDS.append(record)
    return path


def expect_group(stack: str, group: str, *, expected, why: str, bug: str | None = None,
                 repo: str, commit: str, file: str, function: str,
                 pending: str | None = None) -> None:
    """The verdict of the CP rank files saved under `STACK/GROUP/` (each with `cp_rank` and
    `cp_size`), which `thdcheck check` reassembles and reports as `STACK/GROUP/cp-group`.
    The rank files themselves are read alone too; their own records say what they expect.
    `pending` (why thdcheck gets it wrong) writes the record under `pending/` instead."""
    path = (PENDING if pending else OUT) / stack / group / "cp-group.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {"case": f"{stack}/{group}/cp-group", "path": f"{stack}/{group}/cp-group",
              "repo": repo, "commit": full_sha(repo, commit), "commit_as_given": commit,
              "file": file, "function": function, "expected": expected, "why": why, "bug": bug,
              **({"pending": pending} if pending else {}),
              "versions": versions()}
    path.write_text(json.dumps(record, indent=1) + "\n")
    RECORDS.append(record)


def place_profile(stack: str, folder: Path, name: str) -> None:
    """A batch's metadata `profile` may name a file only inside the batch's own folder (thdcheck
    never reads a file elsewhere). A stack whose profile is a file (`batches/STACK/NAME.toml`,
    the blind profiles of issue 39, kept there by generate.py) gets a byte-identical copy in any
    other folder a case of it is saved in (a CP group's folder, `pending/STACK/`)."""
    if not name.endswith(".toml") or "/" in name:
        return
    canonical = OUT / stack / name
    if not canonical.is_file():
        sys.exit(f"{stack}: metadata profile {name!r} names no file {canonical}")
    target = folder / name
    if target.resolve() != canonical.resolve():
        target.write_bytes(canonical.read_bytes())


def versions() -> dict:
    import torch

    v = {"python": sys.version.split()[0], "torch": torch.__version__}
    try:
        import transformers

        v["transformers"] = transformers.__version__
    except ImportError:
        pass
    return v


class _StubMeta(type):
    """Metaclass of the permissive stand-ins made by `permissive_stub`: any attribute is another
    stand-in class, a call with one callable argument returns it (a decorator), any other call
    returns an instance. Only for imports the function under test never uses."""

    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _StubMeta(name, (), {})

    def __call__(cls, *args, **kwargs):
        if len(args) == 1 and not kwargs and callable(args[0]):
            return args[0]
        return type.__call__(cls)


class _PermissiveModule(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        value = _StubMeta(name, (), {})
        setattr(self, name, value)
        return value


class _PermissiveFinder:
    """Resolves every module under the given prefixes to a `_PermissiveModule`."""

    def __init__(self, prefixes):
        self.prefixes = tuple(prefixes)

    def find_spec(self, fullname, path=None, target=None):
        if any(fullname == p or fullname.startswith(p + ".") for p in self.prefixes):
            return importlib.util.spec_from_loader(fullname, self)
        return None

    def create_module(self, spec):
        mod = _PermissiveModule(spec.name)
        mod.__path__ = []
        return mod

    def exec_module(self, module):
        pass


def permissive_stub(*prefixes: str) -> list[str]:
    """Makes every import under `prefixes` (e.g. "transformer_engine", "megatron.core") succeed
    with permissive stand-ins, for heavy imports at the top of an upstream file that the
    function under test does not use. Modules already in `sys.modules` (explicit `stub()`s)
    win. Returns the prefixes, for the record's `stubs=`."""
    sys.meta_path.insert(0, _PermissiveFinder(prefixes))
    return [f"{p}.* (permissive stand-in, unused by the function)" for p in prefixes]
