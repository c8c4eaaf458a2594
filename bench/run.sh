#!/usr/bin/env bash
# Runs the Rust reference-batch benchmark and the PyTorch script in one go and prints the
# figures side by side, with the three ratios of the foundation issue.
#
#   bench/run.sh                   # everything (a few minutes on 2 cores)
#   bench/run.sh attn scale        # groups: attn oracle scale loss (Rust) ; torch follows them
#
# PyTorch comes from a venv at bench/.venv (gitignored), created on first use:
#   python3 -m venv bench/.venv && bench/.venv/bin/pip install torch numpy
# Both sides use 2 threads (rayon's default on a 2-core machine; NTHREADS for torch). Run it on a
# quiet machine: the load average is printed before and after.
set -euo pipefail
cd "$(dirname "$0")/.."
py=bench/.venv/bin/python
if [ ! -x "$py" ]; then
    python3 -m venv bench/.venv
    bench/.venv/bin/pip install --quiet torch numpy
fi
groups=("$@")
[ ${#groups[@]} -eq 0 ] && groups=(attn oracle scale loss)
torch_groups=()
for g in "${groups[@]}"; do
    case "$g" in
        attn) torch_groups+=(attn) ;;
        oracle) torch_groups+=(ref) ;;
        scale) torch_groups+=(scale) ;;
        loss) torch_groups+=(ce) ;;
    esac
done
out=$(mktemp -d)
echo "load before: $(uptime)"
cargo bench -p oracle --bench reference_batch -- "${groups[@]}" | tee "$out/rust.txt"
NTHREADS=${NTHREADS:-2} "$py" bench/torch_reference_batch.py "${torch_groups[@]}" | tee "$out/torch.txt"
echo "load after:  $(uptime)"
python3 - "$out/rust.txt" "$out/torch.txt" <<'PY'
import json, sys
rows = []
for path in sys.argv[1:]:
    for line in open(path):
        if line.startswith("BENCH "):
            rows.append(json.loads(line[6:]))
def get(bench, dtype, case=None):
    for r in rows:
        if r["bench"] == bench and r.get("dtype") == dtype and (case is None or r.get("case") == case):
            return r["median_s"]
    return None
print()
print("| measurement | dtype | median s | useful GFLOP/s |")
print("|---|---|---|---|")
for r in rows:
    if "median_s" not in r:
        continue
    name = r["bench"] + (" " + r["case"] if r.get("case") else "")
    g = r.get("useful_gflops")
    print(f"| {name} | {r['dtype']} | {r['median_s']:.3f} | {'' if g is None else f'{g:.1f}'} |")
print()
for label, a, b in (
    ("oracle f64 / torch attention_ref (padded) f64", get("attn oracle", "f64", "ref16"), get("attn torch_attention_ref_padded", "f64")),
    ("fast path f32 / torch per-document SDPA f32", get("attn fast_path", "f32", "ref16"), get("attn torch_sdpa_per_doc", "f32")),
    ("fast path f64 / torch per-document SDPA f64", get("attn fast_path", "f64", "ref16"), get("attn torch_sdpa_per_doc", "f64")),
    ("packed loss f32 / torch cross_entropy f32", get("loss packed_cross_entropy", "f32"), get("loss torch_cross_entropy", "f32")),
):
    if a is not None and b is not None:
        print(f"ratio {label}: {a:.3f} s / {b:.3f} s = {a / b:.2f}  ({'ok' if a <= b else 'SLOWER'}: target <= 1)")
PY
