#!/usr/bin/env bash
# The CPU gate. Every command here is one the README tells a user to run.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n== %s\n' "$*"; }
t0=$SECONDS

step "format"
cargo fmt --all -- --check

step "README quick start 1/2: the main job on its built-in default"
cargo run -p thdcheck -- check examples/batches

step "hostile inputs: mutated files, known verdicts, CLI misuse, misbehaving adapters (ci/hostile.py)"
python3 ci/hostile.py "${CARGO_TARGET_DIR:-target}/debug/thdcheck"

step "README: the other commands of the quick start"
cargo run -p thdcheck -- selfcheck
cargo run -p thdcheck -- selfcheck --zoo
for seed in 1 2 3 37 129; do cargo run -q -p thdcheck -- selfcheck --seed "$seed" >/dev/null; done
cargo run -p thdcheck -- check examples/batches/good/te_thd_cp2.safetensors --cp-size 2
cargo run -q -p thdcheck -- check --quiet corpus/real/batches   # what the real upstream code returns
cargo run -p thdcheck -- metrics --recipe golden/tests/recipes/qwen3_8b_sft_seq4096.toml
cargo run -p thdcheck -- fuzz packer --cases 64 -- python3 adapters/python/examples/greedy_packer.py
cargo run -p thdcheck -- fuzz packer --session -- python3 adapters/python/examples/streaming_packer.py
cargo run -p thdcheck -- fuzz logger --cases 64 -- python3 adapters/python/examples/logger.py
cargo run -p thdcheck -- fuzz loss --cases 64 -- python3 adapters/python/examples/cp_loss.py
cargo run -p thdcheck -- fuzz cp-split --cases 64 -- python3 adapters/python/examples/cp_split.py

step "README quick start 2/2: the tests"
cargo test --workspace

step "Python package: build the wheel in a fresh venv and run its tests (python/README.md)"
venv=$(mktemp -d)/venv
python3 -m venv "$venv"
# The wheel is built once (maturin, as the release workflow does) and installed offline; the
# tests and the installed command run against it.
# manylinux2014 (glibc >= 2.17), linked by zig from PyPI: the wheel a user installs anywhere.
"$venv/bin/pip" install -q maturin ziglang
# Two wheels: the package (python/: the PyO3 module binding reader, rules and engine) and the
# command it depends on (cli/: `thdcheck-cli`, the binary on PATH).
dist=$(dirname "$venv")/dist
for pkg in python cli; do
  (cd "$pkg" && PATH="$venv/bin:$PATH" "$venv/bin/maturin" build --release -q --zig \
      --compatibility manylinux2014 -o "$dist")
done
"$venv/bin/pip" install -q --no-index --find-links "$dist" thdcheck
"$venv/bin/pip" install -q pytest numpy
"$venv/bin/thdcheck" check examples/batches >/dev/null   # the command the wheel installs
"$venv/bin/python" -m pytest -q python/tests
python3 ci/hostile.py --python "$venv/bin/python"   # hostile values, each in a child interpreter
cargo fmt --manifest-path python/Cargo.toml -- --check

step "golden: no unreferenced snapshots (what cargo insta --unreferenced=reject checks)"
for snap in golden/tests/snapshots/*.snap; do
  recipe=${snap##*@}; recipe=${recipe%.snap}
  [ -f "golden/tests/recipes/$recipe" ] || { echo "unreferenced snapshot: $snap (no golden/tests/recipes/$recipe)"; exit 1; }
done
pending=$(find . -path ./target -prune -o \( -name '*.snap.new' -o -name '*.pending-snap' \) -print)
[ -z "$pending" ] || { echo "unreviewed snapshots: $pending"; exit 1; }

step "lint"
cargo clippy --workspace --all-targets -- -D warnings

step "docs"
RUSTDOCFLAGS=-Dwarnings cargo doc --workspace --no-deps

printf '\n== ci/test.sh done in %ss\n' "$((SECONDS - t0))"
