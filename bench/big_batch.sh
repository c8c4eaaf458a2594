#!/usr/bin/env bash
# Peak memory and end-to-end time of `thdcheck check` on one 1e8-token batch (issue 15):
#
#   bench/big_batch.sh                       # the release build of this tree
#   bench/big_batch.sh OLD_BINARY ...        # ... side by side with other builds (e.g. an older commit's)
#
# Writes /tmp/thdcheck-big-int32.safetensors (1.2 GB) and -int64 (2.4 GB) with bench/big_batch.py
# (needs numpy: bench/.venv from bench/run.sh, or any python with numpy as $PYTHON), then runs
# each binary twice per file under /usr/bin/time and prints wall time, tokens/s and peak RSS
# against the file size. Run it on a quiet machine.
set -euo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-bench/.venv/bin/python}
cargo build --release -q -p thdcheck
bins=("$PWD/target/release/thdcheck" "$@")
tokens=100000000
for dt in int32 int64; do
    f=/tmp/thdcheck-big-$dt.safetensors
    [ -f "$f" ] || "$py" bench/big_batch.py "$f" "$tokens" --dtype "$dt"
    size=$(stat -c %s "$f")
    for b in "${bins[@]}"; do
        for _ in 1 2; do
            /usr/bin/time -f "%e %M" -o /tmp/thdcheck-big.time "$b" check --quiet "$f" >/dev/null
            read -r wall rss_kb < /tmp/thdcheck-big.time
            awk -v b="$b" -v dt="$dt" -v w="$wall" -v r="$rss_kb" -v s="$size" -v t="$tokens" 'BEGIN {
                printf "%-5s %-50s %6.2f s  %.2e tokens/s  peak RSS %.2f GB = %.2fx the file (%.2f GB)\n",
                    dt, b, w, t / w, r * 1024 / 1e9, r * 1024 / s, s / 1e9 }'
        done
    done
done
