#!/usr/bin/env bash
# Peak memory and time of `thdcheck check` over many small files (issue 24, item 3): the report
# of each file is printed as it is made (`--json` included), so memory should not grow with the
# number of files.
#
#   bench/many_files.sh [N] [BINARY ...]      # default: 50,000 files, target/debug/thdcheck
#
# Writes /tmp/thdcheck-many-N/ once: N hard links (no disk space) to the committed single-file
# batches of examples/batches/good, 1,000 per subdirectory, then runs each binary with --json,
# the text report and --quiet under /usr/bin/time and prints wall time and peak RSS.
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-50000}
shift || true
bins=("$@")
[ ${#bins[@]} -gt 0 ] || bins=("$PWD/target/debug/thdcheck")
dir=/tmp/thdcheck-many-$n
if [ ! -d "$dir" ]; then
    python3 - "$dir" "$n" <<'EOF'
import os, sys
from pathlib import Path
out, n = Path(sys.argv[1]), int(sys.argv[2])
# Plain files only (the cp_shards/ rank files would form CP groups).
seeds = sorted(p for p in Path("examples/batches/good").glob("*.safetensors"))
tmp = out.with_name(out.name + ".partial")
for i in range(n):
    d = tmp / f"d{i // 1000:03d}"
    d.mkdir(parents=True, exist_ok=True)
    os.link(seeds[i % len(seeds)], d / f"f{i:06d}.safetensors")
tmp.rename(out)
EOF
fi
for b in "${bins[@]}"; do
    for mode in --json "" --quiet; do
        /usr/bin/time -f "%e %M" -o /tmp/thdcheck-many.time "$b" check $mode "$dir" >/dev/null || true
        read -r wall rss_kb < /tmp/thdcheck-many.time
        awk -v b="$b" -v m="${mode:-(text)}" -v w="$wall" -v r="$rss_kb" -v n="$n" 'BEGIN {
            printf "%-45s %-8s %d files  %6.2f s  peak RSS %7.1f MB = %5.1f KB per file\n",
                b, m, n, w, r / 1024, r / n }'
    done
done
