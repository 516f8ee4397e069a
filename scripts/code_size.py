#!/usr/bin/env python3
"""The longest functions and source files under src/ (issue #11's measure of readability).

Uses Universal Ctags (Debian `universal-ctags`) for function extents; lambdas are left out.
  scripts/code_size.py [--top N] [DIR]
"""
import argparse
import json
import os
import subprocess


def functions(root):
    out = subprocess.run(
        ["ctags", "--output-format=json", "--fields=+ne", "--c++-kinds=f", "-R", "-f", "-", root],
        check=True, capture_output=True, text=True).stdout
    rows = []
    for line in out.splitlines():
        t = json.loads(line)
        if t.get("kind") != "function" or t["name"].startswith("__anon") or "end" not in t:
            continue
        scope = t.get("scope", "")
        name = t["name"] if not scope or "__anon" in scope.split("::")[-1] else \
            scope.split("::")[-1] + "::" + t["name"]
        rows.append((t["end"] - t["line"] + 1, f'{t["path"]}:{t["line"]}', name))
    return sorted(rows, reverse=True)


def files(root):
    rows = []
    for d, _, names in os.walk(root):
        for n in names:
            if n.endswith((".cpp", ".h")):
                p = os.path.join(d, n)
                with open(p, encoding="utf-8", errors="replace") as f:
                    rows.append((sum(1 for _ in f), p))
    return sorted(rows, reverse=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", nargs="?", default="src")
    ap.add_argument("--top", type=int, default=10)
    a = ap.parse_args()
    print(f"longest functions ({a.dir}):")
    for n, where, name in functions(a.dir)[:a.top]:
        print(f"  {n:5d}  {name}  ({where})")
    print(f"longest files ({a.dir}):")
    for n, p in files(a.dir)[:a.top]:
        print(f"  {n:5d}  {p}")


if __name__ == "__main__":
    main()
