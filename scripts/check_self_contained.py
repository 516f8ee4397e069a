#!/usr/bin/env python3
"""Fails when a file of the repository points at a document outside it.

  scripts/check_self_contained.py [REPO_DIR]
  scripts/check_self_contained.py --self-test

The contracts and the architecture live in docs/ (docs/contracts.md, docs/architecture.md);
a fresh clone has nothing beside the repository, so a reference to a sibling folder
(a sibling folder of the checkout), to an absolute path of the machine the project started on, or to the
upper-case names of the documents the repository used to borrow leads nowhere. Every text
file under the folders below (and the top-level files named) is read; this script is not.
--self-test plants such a reference in a scratch tree and fails unless the check finds it.
"""
import os
import re
import sys
import tempfile

FOLDERS = ["src", "docs", "tests", "scripts", "bench", "configs", "cmake"]
TOP_FILES = ["README.md", "CMakeLists.txt", ".clang-format", ".gitignore"]
OUTSIDE = re.compile(r"\.\./shared\b|/work/|\bCONTRACTS\b|\bARCHITECTURE\b|\bSTYLE\.md\b")
ADVICE = "the repository's copies are docs/contracts.md and docs/architecture.md"


def text_files(repo):
    for name in TOP_FILES:
        path = os.path.join(repo, name)
        if os.path.isfile(path):
            yield path
    for folder in FOLDERS:
        for d, dirs, names in os.walk(os.path.join(repo, folder)):
            dirs[:] = [x for x in dirs if not x.startswith(".")]
            for n in sorted(names):
                yield os.path.join(d, n)


def problems_in(repo):
    """(problems, files read) of the tree at repo."""
    problems, read = [], 0
    for path in text_files(repo):
        if os.path.abspath(path) == os.path.abspath(__file__):
            continue  # it names the patterns it looks for
        try:
            with open(path, encoding="utf-8") as f:
                lines = f.readlines()
        except (UnicodeDecodeError, OSError):
            continue  # binary files (images, data) name no documents
        read += 1
        for no, line in enumerate(lines, 1):
            m = OUTSIDE.search(line)
            if m:
                problems.append(f"{os.path.relpath(path, repo)}:{no}: points outside the "
                                f"repository ({m.group(0)}); {ADVICE}")
    return problems, read


def self_test():
    with tempfile.TemporaryDirectory() as repo:
        os.makedirs(os.path.join(repo, "src", "core"))
        with open(os.path.join(repo, "src", "core", "a.h"), "w", encoding="utf-8") as f:
            f.write("// fine: docs/contracts.md section 1\n")
        clean, read = problems_in(repo)
        with open(os.path.join(repo, "src", "core", "b.h"), "w", encoding="utf-8") as f:
            f.write("// see " + "../" + "sh" + "ared/" + "CONTRACTS.md\n")
        planted, _ = problems_in(repo)
    ok = read == 1 and not clean and len(planted) == 1 and planted[0].startswith("src/core/b.h:1:")
    print(f"self-test: clean tree {clean or 'ok'}, planted reference {planted}: "
          f"{'ok' if ok else 'FAILED'}")
    sys.exit(0 if ok else 1)


def main():
    if sys.argv[1:] == ["--self-test"]:
        self_test()
    repo = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
    problems, read = problems_in(repo)
    for p in problems:
        print(p)
    if read == 0:
        problems.append("no file read")
        print("no file read: is this the repository?")
    print(f"{read} files read: {'ok' if not problems else str(len(problems)) + ' problem(s)'}")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
