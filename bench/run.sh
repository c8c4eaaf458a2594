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
python3 bench/side_by_side.py "$out/rust.txt" "$out/torch.txt"
echo "raw outputs: $out"
