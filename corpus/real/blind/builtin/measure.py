"""Judge each of the five stacks' corpus batches under its built-in profile and under the
blind rewrite here (corpus/real/blind/builtin/STACK/profile.toml): verdicts against
corpus/real/batches/expected.toml, facts against each record's `facts`. Run from anywhere:
`python3 corpus/real/blind/builtin/measure.py` (needs target/debug/thdcheck)."""
import json, subprocess, sys, tomllib
from pathlib import Path
import os
os.chdir(Path(__file__).resolve().parents[4])
B = "target/debug/thdcheck"
root = Path("corpus/real/batches")
expected = tomllib.load(open(root / "expected.toml", "rb"))
def rec_of(rel):
    def rd(p):
        try: return json.load(open(root / p))
        except Exception: return None
    if rel.endswith("cp-group"):
        d = rel[:-len("cp-group")]
        return rd(d + "cp-group.json") or rd(d + "rank0.json")
    return rd(rel.replace(".safetensors", ".json"))
def run(stack, prof):
    args = [B, "check", "--json"] + (["--profile", prof] if prof else []) + [str(root / stack)]
    v = json.loads(subprocess.run(args, capture_output=True, text=True).stdout)
    t = dict(valid=0, passed=0, right=0, unread=0, bugs=0, caught=0); notes = []
    for f in v["files"]:
        rel = f["path"].replace("corpus/real/batches/", "")
        if Path(rel).name.startswith("rank"): continue
        rep = f.get("report"); want = expected.get(rel)
        viol = set() if rep is None else {c["id"] for p in rep.get("packs", []) for c in p.get("checks", []) if c["status"] == "violated"} | {c["id"] for c in rep.get("checks", []) if c["status"] == "violated"}
        if want is None:
            t["valid"] += 1
            if rep is None: t["unread"] += 1; notes.append(f"{rel}: unreadable: {f.get('error','')[:150]}"); continue
            if viol: notes.append(f"{rel}: FA {sorted(viol)}"); continue
            t["passed"] += 1
            r = rec_of(rel)
            packs = rep["packs"]; cat = [p for p in packs if p.get("part") == "concatenated"]; packs = cat or packs
            got = [sum(p["facts"].get("real_segments") or 0 for p in packs), sum(p["facts"].get("real_tokens") or 0 for p in packs), sum((p["facts"].get("useful") or {}).get("sum_squares") or 0 for p in packs)]
            w = r and [r["facts"]["documents"], r["facts"]["real_tokens"], r["facts"]["useful_sum_sq"]]
            if got == w: t["right"] += 1
            else: notes.append(f"{rel}: facts {got} want {w}")
        else:
            t["bugs"] += 1
            if all(x in viol for x in want): t["caught"] += 1
            else: notes.append(f"{rel}: bug {want} got {sorted(viol)}" + ("" if rep else " (unreadable)"))
    return t, notes
tot = {}
for stack in ["megatron_lm", "areal", "slime", "skyrl", "open_instruct"]:
    for label, prof in [("builtin", None), ("blind", f"corpus/real/blind/builtin/{stack}/profile.toml")]:
        t, notes = run(stack, prof)
        print(f"{stack:14} {label:8} {t}")
        for n in notes: print("      ", n)
        for k, v in t.items(): tot.setdefault(label, {}).setdefault(k, 0); tot[label][k] += v
print(tot)
