#!/usr/bin/env python3
"""Compare an experiment's summary.csv in the working tree with the committed one (HEAD).

Usage: scripts/compare_summaries.py EXPERIMENT [REV]

Rows are keyed by (dataset, method, setting, metric); timings (time_*) are left out, since
they depend on the machine. Prints every row whose mean or sd differs, rows that disappeared,
and the count of new rows (e.g. diagnostics the older code did not store). Exits 1 if any
committed row changed or disappeared: for checking that a rerun (a cell archive, a refactor
that kept the numerics versions) reproduces the committed numbers.
"""
import csv
import io
import subprocess
import sys
from pathlib import Path

root = Path(__file__).resolve().parent.parent


def rows(text):
    table = list(csv.DictReader(io.StringIO(text)))
    return {(r["dataset"], r["method"], r.get("setting", ""), r["metric"]): r for r in table}


def main():
    exp = sys.argv[1]
    rev = sys.argv[2] if len(sys.argv) > 2 else "HEAD"
    path = f"results/{exp}/summary.csv"
    old = rows(subprocess.run(["git", "show", f"{rev}:{path}"], capture_output=True, text=True, check=True, cwd=root).stdout)
    new = rows((root / path).read_text())
    same, changed = 0, 0
    for key, row in old.items():
        if key[3].startswith("time_"):
            continue
        if key not in new:
            print("missing", key)
            changed += 1
        elif (row["mean"], row["sd"]) != (new[key]["mean"], new[key]["sd"]):
            print("changed", key, row["mean"], "->", new[key]["mean"], "sd", row["sd"], "->", new[key]["sd"])
            changed += 1
        else:
            same += 1
    added = sum(1 for key in new if key not in old)
    print(f"{exp}: {same} rows identical, {changed} changed or missing, {added} new")
    sys.exit(1 if changed else 0)


if __name__ == "__main__":
    main()
