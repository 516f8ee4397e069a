#!/usr/bin/env python3
"""Fails when a source file of src/ is missing from docs/architecture.md's listing.

  scripts/check_architecture_listing.py [REPO_DIR]
  scripts/check_architecture_listing.py --self-test

docs/architecture.md lists every file of each floor in one code block, a paragraph per
floor starting at the line `<floor>/` (train/, cli/, ...). A file is listed when its name
without extension (foo for foo.h and foo.cpp) appears as a word in its floor's paragraph;
`flash_attention*` lists every file whose name starts flash_attention. A file added
without a line there (validate_context_parallel once) fails this check, naming it.
--self-test removes a listed name from a scratch copy and fails unless the check finds it.
"""
import os
import re
import shutil
import sys
import tempfile

SOURCE = re.compile(r"\.(h|cpp)$")
FLOOR_LINE = re.compile(r"^([a-z_]+)/(\s|$)")


def listing(doc_text):
    """{floor: its paragraph's text} of the code block that lists the files."""
    blocks = re.findall(r"```\n(.*?)```", doc_text, re.S)
    block = next((b for b in blocks if re.search(r"^cli/\s", b, re.M)), "")
    floors, current = {}, None
    for line in block.splitlines():
        m = FLOOR_LINE.match(line)
        if m:
            current = m.group(1)
            floors.setdefault(current, "")
        if current:
            floors[current] += line + "\n"
    return floors


def listed(name, text):
    if re.search(r"(?<![\w/.])" + re.escape(name) + r"(?![\w])", text):
        return True
    return any(name.startswith(p) for p in re.findall(r"([\w]+)\*", text))


def problems_in(repo):
    """(problems, files checked) of the tree at repo."""
    with open(os.path.join(repo, "docs", "architecture.md"), encoding="utf-8") as f:
        floors = listing(f.read())
    problems, checked = [], 0
    src = os.path.join(repo, "src")
    for floor in sorted(os.listdir(src)):
        if not os.path.isdir(os.path.join(src, floor)):
            continue
        if floor not in floors:
            problems.append(f"src/{floor}/: no paragraph '{floor}/' in docs/architecture.md")
            continue
        names = set()
        for d, dirs, files in os.walk(os.path.join(src, floor)):
            dirs[:] = sorted(x for x in dirs if not x.startswith("."))
            for n in files:
                if SOURCE.search(n):
                    names.add((os.path.relpath(d, src), SOURCE.sub("", n)))
        for folder, name in sorted(names):
            checked += 1
            if not listed(name, floors[floor]):
                problems.append(f"src/{folder}/{name}: not listed under '{floor}/' in "
                                "docs/architecture.md")
    return problems, checked


def self_test(repo):
    with tempfile.TemporaryDirectory() as scratch:
        shutil.copytree(os.path.join(repo, "src"), os.path.join(scratch, "src"))
        os.makedirs(os.path.join(scratch, "docs"))
        with open(os.path.join(repo, "docs", "architecture.md"), encoding="utf-8") as f:
            doc = f.read()
        with open(os.path.join(scratch, "docs", "architecture.md"), "w", encoding="utf-8") as f:
            f.write(doc)
        clean, checked = problems_in(scratch)
        name = "validate_context_parallel"
        with open(os.path.join(scratch, "docs", "architecture.md"), "w", encoding="utf-8") as f:
            f.write(re.sub(r"\b" + name + r"\b", "", doc))
        removed, _ = problems_in(scratch)
    ok = checked > 100 and not clean and removed == [
        f"src/train/{name}: not listed under 'train/' in docs/architecture.md"]
    print(f"self-test: {checked} files, listing {clean or 'ok'}, {name} removed: {removed}: "
          f"{'ok' if ok else 'FAILED'}")
    sys.exit(0 if ok else 1)


def main():
    args = [a for a in sys.argv[1:] if a != "--self-test"]
    repo = args[0] if args else os.path.join(os.path.dirname(__file__), "..")
    if "--self-test" in sys.argv[1:]:
        self_test(repo)
    problems, checked = problems_in(repo)
    for p in problems:
        print(p)
    if checked == 0:
        problems.append("no file checked")
        print("no file checked: is this the repository?")
    print(f"{checked} source files checked: "
          f"{'ok' if not problems else str(len(problems)) + ' not listed'}")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
