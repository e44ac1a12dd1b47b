#!/usr/bin/env python3
"""Prints the targets of ../shared/design/performance.md next to the measured ratios (marfafs / native)
from a bench.py rows.jsonl, with the reference FUSE filesystem (kbmirror) beside them when present."""
import json, sys
TARGETS = [("grep_r", "warm", 1.3), ("grep_r", "cold", 1.5), ("rg", "warm", 1.3), ("cat_all", "warm", 1.2),
           ("cat_all", "cold", 1.5), ("find", "warm", 1.3), ("find", "cold", 6.0), ("ls_lR", "warm", 4.0),
           ("big_seq", "cold", 1.3), ("create2000", "warm", 3.0), ("save200", "warm", 1.6)]
rows = [json.loads(l) for l in open(sys.argv[1])]
med = {(r["workload"], r["mode"], r["target"]): r["median"] for r in rows}
print("| workload | mode | target | marfafs | met | kbmirror |")
print("|---|---|---|---|---|---|")
for w, m, t in TARGETS:
    n = med.get((w, m, "native"))
    mine = med.get((w, m, "marfafs"))
    ref = med.get((w, m, "kbmirror"))
    if not n or mine is None:
        continue
    ratio = mine / n
    print(f"| {w} | {m} | ≤ {t:g}× | {ratio:.1f}× | {'yes' if ratio <= t else 'no'} | {f'{ref / n:.1f}×' if ref else '–'} |")
