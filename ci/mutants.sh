#!/usr/bin/env bash
# One shard of mutation testing on thd (.cargo/mutants.toml): `ci/mutants.sh K [N]` runs shard
# K of N (default 25) and leaves mutants.out/ (caught.txt, missed.txt, unviable.txt, timeout.txt).
# With THD_MUTANTS_PROPERTIES=1 the properties suite judges the mutants too (--test-package).
# Needs `cargo install cargo-mutants`. The scheduled workflow runs every shard, one per runner.
set -euo pipefail
cd "$(dirname "$0")/.."
k=${1:?usage: ci/mutants.sh SHARD [SHARDS]}
n=${2:-25}
extra=()
if [ "${THD_MUTANTS_PROPERTIES:-0}" = 1 ]; then
  extra+=(--test-package thd --test-package properties)
fi
cargo mutants --package thd --shard "$k/$n" --sharding round-robin --no-shuffle --gitignore true "${extra[@]}"
