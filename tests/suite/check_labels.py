#!/usr/bin/env python3
"""Every ctest entry carries exactly one primary label, and only an `mpi` one starts MPI.

    check_labels.py CTEST BUILD_DIR

Reads the registered tests (`ctest --show-only=json-v1`, gtest cases included once their
executables are built) and fails, naming each offender, when a test has no primary label
or more than one, or when a test not labelled `mpi` has mpirun or mpiexec on its command
line. Prints the number of tests per label. tests/CMakeLists.txt explains the labels.
"""
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


def problems_of(test):
    name, labels = test["name"], labels_of(test)
    primary = [label for label in labels if label in PRIMARY]
    problems = []
    if len(primary) != 1:
        problems.append(f"{name}: labels {labels}: give it exactly one of {', '.join(PRIMARY)} "
                        "(tests/CMakeLists.txt)")
    if "mpi" not in labels and any(MPI_LAUNCHER.search(word) for word in test.get("command", [])):
        problems.append(f"{name}: starts mpirun but is not labelled mpi")
    return primary, problems


def main():
    ctest, build_dir = sys.argv[1], sys.argv[2]
    listing = subprocess.run([ctest, "--show-only=json-v1"], cwd=build_dir, check=True,
                             capture_output=True, text=True).stdout
    tests = json.loads(listing)["tests"]
    counts, problems, not_built = collections.Counter(), [], []
    for test in tests:
        if test["name"].endswith("_NOT_BUILT"):  # a gtest executable not built yet
            not_built.append(test["name"][:-len("_NOT_BUILT")])
            continue
        primary, found = problems_of(test)
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
