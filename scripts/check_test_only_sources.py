#!/usr/bin/env python3
"""Fails when a header of src/ outside a reference/ folder is included by nothing in src/.

  scripts/check_test_only_sources.py [REPO_DIR]
  scripts/check_test_only_sources.py --self-test [REPO_DIR]

A header no other file of src/ includes (its own .cpp does not count) is either dead or
serves only tests; code that exists only to check other code is a naive twin and belongs
in a reference/ folder (kernels/reference/), where a reader knows it never runs in a
training step. The (T, T) attention-dropout kernel stayed in kernels/ for a stop after the
blocks moved to the flash core; this check names such a file.
--self-test adds an unused header to a scratch copy and fails unless the check finds it.
"""
import os
import re
import shutil
import sys
import tempfile

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def sources(src):
    for d, dirs, files in os.walk(src):
        dirs[:] = sorted(x for x in dirs if not x.startswith("."))
        for n in sorted(files):
            if n.endswith((".h", ".cpp")):
                yield os.path.relpath(os.path.join(d, n), src)


def problems_in(repo):
    """(problems, headers checked) of the tree at repo."""
    src = os.path.join(repo, "src")
    files = list(sources(src))
    used = set()
    for rel in files:
        with open(os.path.join(src, rel), encoding="utf-8") as f:
            text = f.read()
        stem = os.path.splitext(rel)[0]
        used.update(h for h in INCLUDE.findall(text) if os.path.splitext(h)[0] != stem)
    headers = [r for r in files if r.endswith(".h") and "reference" not in r.split(os.sep)]
    problems = [f"src/{h}: included by nothing in src/ (a test-only twin belongs in a "
                "reference/ folder; dead code is deleted)" for h in headers if h not in used]
    return problems, len(headers)


def self_test(repo):
    with tempfile.TemporaryDirectory() as scratch:
        shutil.copytree(os.path.join(repo, "src"), os.path.join(scratch, "src"))
        clean, _ = problems_in(scratch)
        orphan = os.path.join(scratch, "src", "kernels", "orphan_twin.h")
        with open(orphan, "w", encoding="utf-8") as f:
            f.write("#pragma once\n")
        found, _ = problems_in(scratch)
        added = [p for p in found if p not in clean]
        if added != ["src/kernels/orphan_twin.h: included by nothing in src/ (a test-only "
                     "twin belongs in a reference/ folder; dead code is deleted)"]:
            print(f"self-test: an unused header was not reported: {added}")
            return 1
        os.rename(orphan, os.path.join(scratch, "src", "kernels", "reference", "orphan_twin.h"))
        if [p for p in problems_in(scratch)[0] if p not in clean]:
            print("self-test: a header under reference/ was reported")
            return 1
    print("self-test: ok")
    return 0


def main(argv):
    if argv and argv[0] == "--self-test":
        return self_test(argv[1] if len(argv) > 1 else ".")
    repo = argv[0] if argv else "."
    problems, checked = problems_in(repo)
    for p in problems:
        print(p)
    if problems:
        return 1
    print(f"{checked} headers checked: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
