#!/usr/bin/env python3
"""Prints the `BENCH {json}` lines of the Rust bench and the torch script side by side, with the
foundation issue's ratios. Usage: side_by_side.py RUST_OUTPUT TORCH_OUTPUT [MORE_OUTPUT...]"""
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
