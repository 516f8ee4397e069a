#!/usr/bin/env python3
"""The longest functions and source files under src/ (issue #11's measure of readability).

Function extents come from Universal Ctags (Debian `universal-ctags`); lambdas, which
ctags does not see, are found here and counted as functions of their own (a lambda's
lines count for it and for the function around it).
  scripts/code_size.py [--top N] [DIR]
  scripts/code_size.py --check [--max-function 80] [--max-file 450] [--allow FILE]... [DIR]
With --check, prints every function and file over its limit and exits 1 if there is one
outside the files --allow names (each still printed, as allowed).
"""
import argparse
import json
import os
import re
import subprocess
import sys

SOURCES = (".cpp", ".h")
# Words after which `[` opens a lambda even though a word precedes it.
EXPRESSION_KEYWORDS = {"return", "co_return", "co_yield", "case", "throw", "else", "do"}


def ctags_functions(root):
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
        rows.append((t["end"] - t["line"] + 1, t["path"], t["line"], t["end"], name))
    return rows


def blank_comments_and_literals(text):
    """The text with comments, string and character literals replaced by spaces (newlines
    kept), so brackets inside them do not count."""
    out = list(text)
    i, n = 0, len(text)

    def blank(a, b):
        for k in range(a, b):
            if out[k] != "\n":
                out[k] = " "

    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            blank(i, j)
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            blank(i, j)
            i = j
        elif c == "R" and text.startswith('R"', i) and (i == 0 or not text[i - 1].isalnum()):
            m = re.match(r'R"([^(\s]*)\(', text[i:])
            if not m:
                i += 1
                continue
            end = text.find(")" + m.group(1) + '"', i)
            j = n if end < 0 else end + len(m.group(1)) + 2
            blank(i, j)
            i = j
        elif c in "\"'":
            if c == "'" and i > 0 and text[i - 1].isalnum():  # digit separator 1'000
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            blank(i, min(j + 1, n))
            i = j + 1
        else:
            i += 1
    return "".join(out)


def matching(text, i, open_c, close_c):
    """Index of the bracket closing the one at i, or -1."""
    depth = 0
    for j in range(i, len(text)):
        if text[j] == open_c:
            depth += 1
        elif text[j] == close_c:
            depth -= 1
            if depth == 0:
                return j
    return -1


def lambda_body_start(text, close):
    """Index of the `{` of a lambda whose capture list ends at `close`, or -1 when the
    brackets are not a lambda's (a structured binding, a declarator)."""
    j = close + 1
    n = len(text)
    while j < n and text[j].isspace():
        j += 1
    if j < n and text[j] == "<":  # template parameters
        j = matching(text, j, "<", ">") + 1
        if j == 0:
            return -1
        while j < n and text[j].isspace():
            j += 1
    if j < n and text[j] == "(":
        j = matching(text, j, "(", ")") + 1
        if j == 0:
            return -1
    # Specifiers and a trailing return type, up to the body.
    m = re.match(r"[\s\w:<>,&*]*(?:->[\s\w:<>,&*]*)?(?:noexcept\s*\([^)]*\)[\s\w]*)?\{",
                 text[j:j + 400])
    return j + m.end() - 1 if m else -1


def lambdas_in(text):
    """(first line, last line, variable name or "") of every lambda in blanked source."""
    found = []
    for m in re.finditer(r"\[", text):
        i = m.start()
        if text.startswith("[[", i) or (i > 0 and text[i - 1] == "["):
            continue  # an attribute
        k = i - 1
        while k >= 0 and text[k].isspace():
            k -= 1
        if k >= 0 and (text[k] in ")]" or text[k].isalnum() or text[k] == "_"):
            w = re.search(r"(\w+)$", text[:k + 1])
            if not (w and w.group(1) in EXPRESSION_KEYWORDS):
                continue  # a subscript or a declarator
        close = matching(text, i, "[", "]")
        if close < 0:
            continue
        body = lambda_body_start(text, close)
        if body < 0:
            continue
        end = matching(text, body, "{", "}")
        if end < 0:
            continue
        name = re.search(r"(\w+)\s*=\s*$", text[max(0, i - 80):i])
        found.append((text.count("\n", 0, i) + 1, text.count("\n", 0, end) + 1,
                      name.group(1) if name else ""))
    return found


def source_files(root):
    for d, _, names in os.walk(root):
        for n in sorted(names):
            if n.endswith(SOURCES):
                yield os.path.join(d, n)


def functions(root):
    """(lines, "path:line", name) of every function and lambda, longest first."""
    named = ctags_functions(root)
    by_path = {}
    for lines, path, first, last, name in named:
        by_path.setdefault(path, []).append((first, last, name))
    rows = [(lines, f"{path}:{first}", name) for lines, path, first, last, name in named]
    for path in source_files(root):
        with open(path, encoding="utf-8", errors="replace") as f:
            text = blank_comments_and_literals(f.read())
        for first, last, var in lambdas_in(text):
            around = [f for f in by_path.get(path, []) if f[0] <= first and last <= f[1]]
            outer = min(around, key=lambda f: f[1] - f[0])[2] if around else "(file scope)"
            rows.append((last - first + 1, f"{path}:{first}",
                         f"{outer}::lambda{' ' + var if var else ''}"))
    return sorted(rows, reverse=True)


def files(root):
    rows = []
    for p in source_files(root):
        with open(p, encoding="utf-8", errors="replace") as f:
            rows.append((sum(1 for _ in f), p))
    return sorted(rows, reverse=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", nargs="?", default="src")
    ap.add_argument("--top", type=int, default=10)
    ap.add_argument("--check", action="store_true", help="fail on anything over the limits")
    ap.add_argument("--max-function", type=int, default=80)
    ap.add_argument("--max-file", type=int, default=450)
    ap.add_argument("--allow", action="append", default=[],
                    help="a file (path ending) whose excess is printed but does not fail")
    a = ap.parse_args()
    fns, fls = functions(a.dir), files(a.dir)
    if a.check:
        def allowed(path):
            return any(path.split(":")[0].endswith(x) for x in a.allow)
        failed = False
        for n, where, name in fns:
            if n > a.max_function:
                failed |= not allowed(where)
                print(f"{'allowed: ' if allowed(where) else ''}function over {a.max_function} "
                      f"lines: {n:5d}  {name}  ({where})")
        for n, p in fls:
            if n > a.max_file:
                failed |= not allowed(p)
                print(f"{'allowed: ' if allowed(p) else ''}file over {a.max_file} lines: "
                      f"{n:5d}  {p}")
        print("over the limits" if failed else "within the limits")
        sys.exit(1 if failed else 0)
    print(f"longest functions ({a.dir}; lambdas counted as their own):")
    for n, where, name in fns[:a.top]:
        print(f"  {n:5d}  {name}  ({where})")
    print(f"longest files ({a.dir}):")
    for n, p in fls[:a.top]:
        print(f"  {n:5d}  {p}")


if __name__ == "__main__":
    main()
