#!/usr/bin/env bash
# Time of `thdcheck check` on one deep directory chain (issue 24, item 3): the walk should cost
# the entries times their depth, not a path resolution per directory on top.
#
#   bench/deep_tree.sh [DEPTH] [BINARY ...]   # default: 2,000 levels, target/debug/thdcheck
#
# Writes /tmp/thdcheck-deep-DEPTH/ once: DEPTH nested one-character directories (a path of
# about 2·DEPTH bytes; keep it under PATH_MAX, 4,096 on Linux) with a good batch at the bottom,
# then runs each binary under /usr/bin/time and prints wall time, peak RSS and the verdict.
set -euo pipefail
cd "$(dirname "$0")/.."
depth=${1:-2000}
shift || true
bins=("$@")
[ ${#bins[@]} -gt 0 ] || bins=("$PWD/target/debug/thdcheck")
dir=/tmp/thdcheck-deep-$depth
if [ ! -d "$dir" ]; then
    python3 - "$dir" "$depth" <<'EOF'
import os, shutil, sys
from pathlib import Path
out, depth = Path(sys.argv[1]), int(sys.argv[2])
seed = Path("examples/batches/good/hf_flatten.safetensors").resolve()
tmp = out.with_name(out.name + ".partial")
tmp.mkdir()
os.chdir(tmp)  # relative paths: the chain may be deeper than a path can name
for _ in range(depth):
    os.mkdir("d")
    os.chdir("d")
shutil.copy(seed, "deep.safetensors")
os.chdir("/")
tmp.rename(out)
EOF
fi
for b in "${bins[@]}"; do
    /usr/bin/time -f "%e %M" -o /tmp/thdcheck-deep.time "$b" check --quiet "$dir" \
        >/tmp/thdcheck-deep.out 2>&1 || true
    read -r wall rss_kb < /tmp/thdcheck-deep.time
    printf "%-45s depth %d  %7.2f s  peak RSS %6.1f MB  %s\n" "$b" "$depth" "$wall" \
        "$(echo "$rss_kb / 1024" | bc -l)" "$(tail -n 1 /tmp/thdcheck-deep.out | cut -c1-60)"
done
