#!/usr/bin/env python3
"""Every ctest entry carries exactly one primary label, and only an `mpi` one starts MPI.

    check_labels.py CTEST BUILD_DIR --full-tests 0|1
    check_labels.py --self-test

Reads the registered tests (`ctest --show-only=json-v1`, gtest cases included once their
executables are built) and fails, naming each offender, when a test has no primary label
or more than one, when a test not labelled `mpi` has mpirun or mpiexec on its command
line, or when a `full` test is registered in a build configured without
MESHTRAIN_FULL_TESTS=1 (`--full-tests 0`): such a test would run in the default suite.
Prints the number of tests per label. tests/CMakeLists.txt explains the labels.
--self-test shows on made-up entries that each of these is caught.
"""
import argparse
import collections
import json
import re
import subprocess
import sys

PRIMARY = ["unit", "binary", "mpi", "equivalence", "reference", "bench", "full"]
MPI_LAUNCHER = re.compile(r"(^|[/\s\"'])(mpirun|mpiexec|orterun|prterun)(\s|$|[\"'])")


def labels_of(test):
    for prop in test.get("properties", []):
        if prop["name"] == "LABELS":
            return prop["value"]
    return []


def problems_of(test, full_tests):
    name, labels = test["name"], labels_of(test)
    primary = [label for label in labels if label in PRIMARY]
    problems = []
    if len(primary) != 1:
        problems.append(f"{name}: labels {labels}: give it exactly one of {', '.join(PRIMARY)} "
                        "(tests/CMakeLists.txt)")
    if "mpi" not in labels and any(MPI_LAUNCHER.search(word) for word in test.get("command", [])):
        problems.append(f"{name}: starts mpirun but is not labelled mpi")
    if primary == ["full"] and not full_tests:
        problems.append(f"{name}: labelled full but registered in a build configured without "
                        "MESHTRAIN_FULL_TESTS=1, so the default suite runs it")
    return primary, problems


def self_test():
    """Each kind of offender on a made-up entry is caught, and a clean entry is not."""
    def entry(name, labels, command=("test_x",)):
        return {"name": name, "command": list(command),
                "properties": [{"name": "LABELS", "value": labels}]}
    cases = [(entry("clean", ["unit"]), False, 0),
             (entry("no_primary", ["moe"]), False, 1),
             (entry("two_primary", ["unit", "binary"]), False, 1),
             (entry("mpirun_outside_mpi", ["binary"], ["mpirun", "-np", "2"]), False, 1),
             (entry("full_by_default", ["full"]), False, 1),
             (entry("full_under_full_tests", ["full"]), True, 0)]
    failed = 0
    for test, full_tests, expected in cases:
        found = len(problems_of(test, full_tests)[1])
        if found != expected:
            print(f"self-test: {test['name']}: {found} problems, expected {expected}")
            failed += 1
    print(f"self-test: {len(cases) - failed} of {len(cases)} cases as expected")
    return 1 if failed else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("ctest", nargs="?")
    ap.add_argument("build_dir", nargs="?")
    ap.add_argument("--full-tests", type=int, choices=[0, 1], default=0,
                    help="1 when the build was configured with MESHTRAIN_FULL_TESTS=1")
    ap.add_argument("--self-test", action="store_true")
    a = ap.parse_args()
    if a.self_test:
        return self_test()
    if not a.build_dir:
        ap.error("CTEST and BUILD_DIR are needed")
    ctest, build_dir = a.ctest, a.build_dir
    listing = subprocess.run([ctest, "--show-only=json-v1"], cwd=build_dir, check=True,
                             capture_output=True, text=True).stdout
    tests = json.loads(listing)["tests"]
    counts, problems, not_built = collections.Counter(), [], []
    for test in tests:
        if test["name"].endswith("_NOT_BUILT"):  # a gtest executable not built yet
            not_built.append(test["name"][:-len("_NOT_BUILT")])
            continue
        primary, found = problems_of(test, a.full_tests)
        counts.update(labels_of(test))
        problems += found
    print(f"{len(tests) - len(not_built)} tests: " +
          ", ".join(f"{label} {counts[label]}" for label in PRIMARY) + "; also " +
          ", ".join(f"{label} {n}" for label, n in sorted(counts.items()) if label not in PRIMARY))
    if not_built:
        print("not built, so not checked: " + " ".join(sorted(set(not_built))))
    for p in problems:
        print("error: " + p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
