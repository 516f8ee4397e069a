#!/usr/bin/env python3
"""Prints every test that did not run and why, and fails unless the allowed-skip list
allows each one here.

    check_skips.py ALLOWED [--run NAME] RESULTS...

RESULTS are ctest's JUnit files (ctest --output-junit) or gtest binaries' XML reports
(--gtest_output=xml:FILE). ALLOWED is tests/suite/allowed_skips.txt: a skip (or a disabled
test) passes only when a rule there names the test and its condition holds on this
machine. --run names the run (e.g. asan) for rules that hold only in one.
"""
import fnmatch
import os
import sys
import xml.etree.ElementTree as ET

# oneDNN's ISA cap (ONEDNN_MAX_CPU_ISA, or DNNL_MAX_CPU_ISA) hides CPU features from the
# engine, so a skip under a cap is judged by what the engine saw: the levels in order, and
# the lowest level that shows a /proc/cpuinfo flag.
ISA_LEVELS = ["SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX512_CORE", "AVX512_CORE_VNNI",
              "AVX512_CORE_BF16", "AVX512_CORE_FP16", "AVX512_CORE_AMX", "ALL"]


def level_of_flag(flag):
    if flag.startswith("amx"):
        return "AVX512_CORE_AMX"
    named = {"avx": "AVX", "avx2": "AVX2", "avx_vnni": "AVX2_VNNI",
             "avx512_vnni": "AVX512_CORE_VNNI", "avx512_bf16": "AVX512_CORE_BF16",
             "avx512_fp16": "AVX512_CORE_FP16"}
    return named.get(flag, "AVX512_CORE" if flag.startswith("avx512") else "SSE41")


def cpu_flags():
    flags = set()
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    cap = (os.environ.get("ONEDNN_MAX_CPU_ISA") or os.environ.get("DNNL_MAX_CPU_ISA") or "ALL")
    if cap.upper() in ISA_LEVELS:
        top = ISA_LEVELS.index(cap.upper())
        flags = {f for f in flags if ISA_LEVELS.index(level_of_flag(f)) <= top}
    return flags


def read_rules(path):
    """[(test glob, condition, why)] from lines 'GLOB CONDITION WHY...' ('#' comments)."""
    rules = []
    with open(path) as f:
        for number, line in enumerate(f, 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            parts = line.split(None, 2)
            if len(parts) < 3 or not parts[1].startswith(("without:", "with:", "run:")):
                sys.exit(f"{path}:{number}: want 'TEST-GLOB without:FLAG[,FLAG] WHY', "
                         f"'TEST-GLOB with:FLAG[,FLAG] WHY' or 'TEST-GLOB run:NAME WHY'")
            rules.append(tuple(parts))
    return rules


def holds(condition, flags, run):
    kind, value = condition.split(":", 1)
    if kind == "run":
        return value == run
    if kind == "with":
        return all(flag in flags for flag in value.split(","))
    return any(flag not in flags for flag in value.split(","))


def xml_skips(path):
    """[(test, why)] of the tests that did not run, from ctest's JUnit file (entries whose
    status is notrun or disabled) or a gtest binary's XML (result skipped, status notrun)."""
    skips = []
    for case in ET.parse(path).getroot().iter("testcase"):
        name, suite = case.get("name"), case.get("classname")
        gtest = suite and suite != name
        if gtest and case.get("result") != "skipped" and case.get("status") != "notrun":
            continue
        if not gtest and case.get("status") not in ("notrun", "disabled"):
            continue
        skipped = case.find("skipped")
        message = skipped.get("message", "") if skipped is not None else ""
        why = (gtest_reason(case.findtext("system-out") or "") if not gtest
               else " ".join(message.splitlines()[1:]))
        skips.append((f"{suite}.{name}" if gtest else name, why or message or "not run"))
    return skips


def gtest_reason(output):
    """The message after gtest's 'file:line: Skipped' line, up to '[  SKIPPED ]', else the
    output's last two lines (a script's own reason, as ctest's SKIP_RETURN_CODE)."""
    why, inside = [], False
    for line in output.splitlines():
        if line.startswith("[  SKIPPED ]"):
            break
        if inside and line.strip():
            why.append(line.strip())
        inside = inside or line.endswith(": Skipped")
    return " ".join(why) or " ".join(l.strip() for l in output.strip().splitlines()[-2:])


def main(argv):
    run = None
    if "--run" in argv:
        i = argv.index("--run")
        run = argv[i + 1]
        del argv[i:i + 2]
    allowed = argv[0]
    rules, flags = read_rules(allowed), cpu_flags()
    skips = []
    for path in argv[1:]:
        skips += xml_skips(path)
    refused = 0
    print(f"{len(skips)} tests did not run" + (":" if skips else ""))
    for test, why in skips:
        rule = next((r for r in rules if fnmatch.fnmatchcase(test, r[0])
                     and holds(r[1], flags, run)), None)
        verdict = f"allowed ({rule[1]}: {rule[2]})" if rule else "NOT ALLOWED"
        refused += rule is None
        print(f"  {test}: {why}\n    {verdict}")
    if refused:
        print(f"{refused} of them may not skip on this machine ({allowed} lists the skips "
              "allowed): install what they need, or fix them")
    return 1 if refused else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
