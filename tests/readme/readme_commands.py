#!/usr/bin/env python3
"""The README's commands, run verbatim on a fresh checkout (issue #31, item 3).

Usage: readme_commands.py MESHTRAIN_BINARY SOURCE_DIR [--mpirun] [--full] [--only REGEX]

Every line of the README's "Using it" block that starts with `build/meshtrain` is run, in
order, in an empty temporary directory laid out as a fresh clone after the build: `build/`
holding the binary, and `configs/` from the source tree. Before them, the Quick start's
training line from scripts/run.sh (its `build/meshtrain` line, which writes out/fortunes/
that `sample` and `report` read). With --mpirun, the block's `mpirun` lines run as well
(the `mpi` label), and only those after the Quick start line.

Small sizes, one documented change to each command: a `train` line runs `--steps 2` (its
`--steps N` replaced, or `--steps 2` appended: the flag overrides the config file), and a
`sample` line `--tokens 8`. The one input a user brings, `mytexts/`, is the text files under
/usr/share/games/fortunes (Debian's fortunes-min/fortunes, which scripts/setup.sh installs):
every one with --full, else the first 8000 bytes of the first 30 (prepare's BPE then takes
2 s instead of 20). --only REGEX runs only the README lines it matches (after the Quick
start line): the default suite's small sibling runs the path of one's own text (prepare,
train --data with its --metrics in a new folder, report).
A command that exits non-zero fails the test, naming it and its stderr.
"""
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile


def block_lines(readme):
    """The command lines of the README's "Using it" code block, comments stripped."""
    text = open(readme).read()
    start = text.index("## Using it")
    body = text[text.index("```sh\n", start) + 6:]
    body = body[:body.index("```")]
    return [line for line in body.splitlines() if line.strip()]


def command_words(line):
    return shlex.split(line, comments=True)


def small(words):
    """--steps 2 for train, --tokens 8 for sample (the only change made to a command)."""
    words = list(words)
    at = words.index("build/meshtrain")
    command = words[at + 1] if len(words) > at + 1 else ""
    if "--help" in words or "--print-config" in words:
        return words
    for name, flag, value in (("train", "--steps", "2"), ("sample", "--tokens", "8")):
        if command != name:
            continue
        if flag in words:
            words[words.index(flag) + 1] = value
        else:
            words += [flag, value]
    return words


def quick_start_line(source_dir):
    for line in open(os.path.join(source_dir, "scripts", "run.sh")):
        if line.startswith("build/meshtrain "):
            return line.replace('"$@"', "").strip()
    raise SystemExit("readme_commands: scripts/run.sh has no build/meshtrain line")


def my_texts(work, full):
    """The folder of text a user brings to `prepare mytexts/`."""
    src = "/usr/share/games/fortunes"
    names = sorted(n for n in os.listdir(src) if not n.endswith((".dat", ".u8"))
                   and os.path.isfile(os.path.join(src, n)))
    os.makedirs(os.path.join(work, "mytexts"))
    for n in names if full else names[:30]:
        with open(os.path.join(src, n), "rb") as f:
            text = f.read() if full else f.read(8000)
        with open(os.path.join(work, "mytexts", n + ".txt"), "wb") as f:
            f.write(text)


def main():
    binary, source = sys.argv[1], sys.argv[2]
    with_mpirun, full = "--mpirun" in sys.argv, "--full" in sys.argv
    only = sys.argv[sys.argv.index("--only") + 1] if "--only" in sys.argv else None
    work = tempfile.mkdtemp(prefix="readme_commands.")
    try:
        os.makedirs(os.path.join(work, "build"))
        os.symlink(os.path.abspath(binary), os.path.join(work, "build", "meshtrain"))
        os.symlink(os.path.join(source, "configs"), os.path.join(work, "configs"))
        my_texts(work, full)
        readme = block_lines(os.path.join(source, "README.md"))
        if only:
            readme = [line for line in readme if re.search(only, line.split("#")[0])]
        ran = 0
        for line in [quick_start_line(source)] + readme:
            words = command_words(line)
            if not words or words[0] not in ("build/meshtrain", "mpirun"):
                continue
            if words[0] == "mpirun" and not with_mpirun:
                continue
            words = small(words)
            shown = " ".join(shlex.quote(w) for w in words)
            print("readme_commands: $ " + shown, flush=True)
            p = subprocess.run(words, cwd=work, capture_output=True, text=True, errors="replace",
                               stdin=subprocess.DEVNULL, timeout=600)
            if p.returncode != 0:
                sys.stderr.write(p.stdout[-2000:] + p.stderr[-4000:])
                raise SystemExit("readme_commands: exit %d from the README's `%s`"
                                 % (p.returncode, line.split("#")[0].strip()))
            ran += 1
        print("readme_commands: %d README commands ran" % ran)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
