#!/usr/bin/env bash
# What `check --html` costs on one 1e8-token batch (issue 42): the page's size, and the check's
# wall time with and without the page (the pictures' gathering, drawing and writing):
#
#   bench/html_page.sh                 # the release build of this tree
#
# Writes /tmp/thdcheck-big-int32.safetensors (1.2 GB, 48 885 documents of 1..4096 tokens) with
# bench/big_batch.py (needs numpy: bench/.venv from bench/run.sh, or any python with numpy as
# $PYTHON), then runs `check --quiet` and `check --quiet --html` alternately, RUNS times each
# (default 5), and prints the median wall times, the overhead and the page's size. Run it on a
# quiet machine: the overhead is a difference of two similar times.
set -euo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-bench/.venv/bin/python}
runs=${RUNS:-5}
cargo build --release -q -p thdcheck
bin="$PWD/target/release/thdcheck"
f=/tmp/thdcheck-big-int32.safetensors
[ -f "$f" ] || "$py" bench/big_batch.py "$f" 100000000 --dtype int32
page=/tmp/thdcheck-big.html
plain=() html=()
for _ in $(seq "$runs"); do
    /usr/bin/time -f "%e" -o /tmp/thdcheck-html.time "$bin" check --quiet "$f" >/dev/null
    plain+=("$(cat /tmp/thdcheck-html.time)")
    /usr/bin/time -f "%e" -o /tmp/thdcheck-html.time "$bin" check --quiet --html "$page" "$f" >/dev/null
    html+=("$(cat /tmp/thdcheck-html.time)")
done
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
least() { printf '%s\n' "$@" | sort -g | head -1; }
p=$(median "${plain[@]}") h=$(median "${html[@]}")
pm=$(least "${plain[@]}") hm=$(least "${html[@]}")
size=$(stat -c %s "$page")
awk -v p="$p" -v h="$h" -v pm="$pm" -v hm="$hm" -v s="$size" -v r="$runs" 'BEGIN {
    printf "check (median of %d)         %6.2f s   (fastest %.2f s)\n", r, p, pm
    printf "check --html (median of %d)  %6.2f s   (fastest %.2f s)  +%.1f%% (fastest: +%.1f%%)\n", r, h, hm, 100 * (h - p) / p, 100 * (hm - pm) / pm
    printf "page                         %6.2f MB (%d bytes)\n", s / 1e6, s }'
