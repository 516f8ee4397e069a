#!/usr/bin/env python3
"""Fails when a src/ file includes a header from a floor it may not use.

  scripts/check_floors.py [REPO_DIR]

The floors are the folders of src/, each one static library. docs/architecture.md lists
them lowest first, each with the floors it links directly (the "Floors" table between the
`floors:begin` and `floors:end` markers). This script checks three things against that
table:
  1. it is an order: every floor links only floors listed before it;
  2. CMakeLists.txt links each library (meshtrain_layer) to exactly the floors the table
     names, so the documented order is the one the linker enforces;
  3. every `#include "floor/..."` in src/<floor>/ names its own floor or one it reaches
     through the table (directly or below); a header-only include the linker cannot
     catch (model/ including parallel/) fails here.
"""
import os
import re
import sys


def floor_table(doc_path):
    with open(doc_path, encoding="utf-8") as f:
        text = f.read()
    m = re.search(r"floors:begin[^\n]*\n(.*?)\n[^\n]*floors:end", text, re.S)
    if not m:
        sys.exit(f"{doc_path}: no floor table between 'floors:begin' and 'floors:end'")
    order, links = [], {}
    for line in m.group(1).splitlines():
        words = line.strip().strip("`").split()
        if not words or words[0].startswith(("```", "floor")):
            continue
        name, deps = words[0], [w for w in words[1:] if w != "-"]
        order.append(name)
        links[name] = deps
    return order, links


def cmake_links(cmake_path):
    with open(cmake_path, encoding="utf-8") as f:
        text = f.read()
    links = {}
    for m in re.finditer(r"meshtrain_layer\(\s*mt_(\w+)\s+(\w+)([^)]*)\)", text):
        _, folder, rest = m.groups()
        links[folder] = sorted(w[3:] for w in rest.split() if w.startswith("mt_"))
    return links


def reachable(links, floor):
    seen, todo = set(), list(links.get(floor, []))
    while todo:
        f = todo.pop()
        if f not in seen:
            seen.add(f)
            todo.extend(links.get(f, []))
    return seen


def main():
    repo = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
    order, links = floor_table(os.path.join(repo, "docs", "architecture.md"))
    errors = []
    # 1. An order, lowest first.
    for i, f in enumerate(order):
        for d in links[f]:
            if d not in order[:i]:
                errors.append(f"docs: floor {f} links {d}, which is not listed below it")
    # 2. The linker's view.
    built = cmake_links(os.path.join(repo, "CMakeLists.txt"))
    src = os.path.join(repo, "src")
    folders = sorted(d for d in os.listdir(src) if os.path.isdir(os.path.join(src, d)))
    for f in sorted(set(folders) | set(order) | set(built)):
        if f not in order:
            errors.append(f"docs: src/{f}/ is not in the floor table")
        elif f not in built:
            errors.append(f"CMakeLists.txt: no meshtrain_layer for floor {f}")
        elif sorted(links[f]) != built[f]:
            errors.append(f"CMakeLists.txt links {f} to {' '.join(built[f]) or '-'}, "
                          f"the floor table to {' '.join(sorted(links[f])) or '-'}")
    # 3. Every include.
    include = re.compile(r'^\s*#\s*include\s+"([^"/]+)/')
    checked = 0
    for f in folders:
        allowed = reachable(links, f) | {f}
        for d, _, names in os.walk(os.path.join(src, f)):
            for n in sorted(names):
                path = os.path.join(d, n)
                with open(path, encoding="utf-8", errors="replace") as fh:
                    for no, line in enumerate(fh, 1):
                        m = include.match(line)
                        if not m or m.group(1) not in order:
                            continue
                        checked += 1
                        if m.group(1) not in allowed:
                            rel = os.path.relpath(path, repo)
                            errors.append(f"{rel}:{no}: floor {f} includes {m.group(1)}/ "
                                          f"(it may use {' '.join(sorted(allowed))})")
    for e in errors:
        print(e)
    if checked == 0:
        errors.append("no include checked")
        print("no include checked: is this the repository?")
    print(f"{checked} includes checked against {len(order)} floors: "
          f"{'ok' if not errors else str(len(errors)) + ' problem(s)'}")
    sys.exit(1 if errors else 0)


if __name__ == "__main__":
    main()
