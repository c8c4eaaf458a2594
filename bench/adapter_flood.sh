#!/usr/bin/env bash
# Peak memory of `thdcheck fuzz` when the adapter answers with one huge line just under
# --max-line-bytes (issue 24): the memory must stay bounded by about the cap, whatever the line
# holds.
#
#   bench/adapter_flood.sh                      # target/debug/thdcheck (cargo build -p thdcheck)
#   bench/adapter_flood.sh BINARY ...           # other builds side by side (an older commit's)
#   MB=100 bench/adapter_flood.sh               # a smaller answer (default 250 MB)
#
# Three adapters, each answering every request with one line of $MB MB:
#   packs   {"thdcheck":1,"id":ID,"packs":[[],[],…]}          (fuzz packer)
#   batch   {"thdcheck":1,"id":ID,"batch":{"input_ids":[[],[],…]}}   (fuzz collator)
#   string  {"thdcheck":1,"id":ID,"rejected":"xxxx…"}         (fuzz packer)
# Each run is one case (--cases 1 --max-shrink-runs 0) under /usr/bin/time; prints the exit
# code, the failure kind, wall time and peak RSS against the answer's size. Before the fix the
# packs line peaked at 7.8 GB (a serde_json::Value tree, 32x the line); make sure the machine
# has that much free before running an old binary.
set -euo pipefail
cd "$(dirname "$0")/.."
mb=${MB:-250}
bins=("$@")
[ ${#bins[@]} -gt 0 ] || bins=("$PWD/target/debug/thdcheck")
adapter=$(mktemp /tmp/thdcheck-flood-XXXXXX.py)
trap 'rm -f "$adapter" /tmp/thdcheck-flood.time /tmp/thdcheck-flood.json' EXIT
cat > "$adapter" <<'EOF'
import json, sys
shape, mb = sys.argv[1], int(sys.argv[2])
n = mb * 1_000_000
for line in sys.stdin:
    rid = json.loads(line)["id"]
    if shape == "packs":
        head, unit, tail = '{"thdcheck":1,"id":%d,"packs":[' % rid, "[],", "[]]}"
    elif shape == "batch":
        head, unit, tail = '{"thdcheck":1,"id":%d,"batch":{"input_ids":[' % rid, "[],", "[]]}}"
    else:
        head, unit, tail = '{"thdcheck":1,"id":%d,"rejected":"' % rid, "x", '"}'
    k = (n - len(head) - len(tail)) // len(unit)
    # Written in chunks: the adapter's own memory stays small (/usr/bin/time reports the
    # largest of thdcheck and the children it waited for).
    sys.stdout.write(head)
    chunk = unit * 1_000_000
    for _ in range(k // 1_000_000):
        sys.stdout.write(chunk)
    sys.stdout.write(unit * (k % 1_000_000) + tail + "\n")
    sys.stdout.flush()
EOF
for b in "${bins[@]}"; do
    for shape in packs batch string; do
        target=packer
        [ "$shape" = batch ] && target=collator
        set +e
        /usr/bin/time -f "%e %M" -o /tmp/thdcheck-flood.time "$b" fuzz "$target" --json \
            --cases 1 --max-shrink-runs 0 --timeout-ms 600000 -- python3 "$adapter" "$shape" "$mb" \
            > /tmp/thdcheck-flood.json 2>/dev/null
        rc=$?
        set -e
        kind=$(python3 -c 'import json,sys
try: print(json.load(open(sys.argv[1]))["failure"]["kind"])
except Exception: print("-")' /tmp/thdcheck-flood.json)
        read -r wall rss_kb < <(tail -n 1 /tmp/thdcheck-flood.time)
        awk -v b="$b" -v s="$shape" -v rc="$rc" -v k="$kind" -v w="$wall" -v r="$rss_kb" -v mb="$mb" 'BEGIN {
            printf "%-40s %-7s exit %-3s %-9s %7.2f s  peak RSS %7.1f MB = %5.2fx the %d MB answer\n",
                b, s, rc, k, w, r * 1024 / 1e6, r * 1024 / (mb * 1e6), mb }'
    done
done
