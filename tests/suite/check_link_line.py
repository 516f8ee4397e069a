#!/usr/bin/env python3
"""Fails when a target's link line names a library it must not link.

  check_link_line.py BUILD_DIR TARGET FORBIDDEN...

The link line is the one the generator wrote (Makefiles: CMakeFiles/TARGET.dir/link.txt;
Ninja: the target's link statement in build.ninja). A FORBIDDEN word matches a library
file name on it (libmt_model.a, libmpi_cxx.so, libdnnl.so.3, ...). No link line found is a
failure too, so the check cannot pass by looking at nothing.
"""
import os
import re
import sys


def makefile_link_line(build, target):
    for d, _, names in os.walk(build):
        if os.path.basename(d) == target + ".dir" and "link.txt" in names:
            with open(os.path.join(d, "link.txt"), encoding="utf-8") as f:
                return f.read()
    return None


def ninja_link_line(build, target):
    path = os.path.join(build, "build.ninja")
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        text = f.read()
    m = re.search(r"^build [^\n]*/" + re.escape(target) + r": CXX_EXECUTABLE_LINKER[^\n]*\n"
                  r"((?:  [^\n]*\n)*)", text, re.M)
    return m.group(0) if m else None


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    build, target, forbidden = sys.argv[1], sys.argv[2], sys.argv[3:]
    line = makefile_link_line(build, target) or ninja_link_line(build, target)
    if not line:
        sys.exit(f"no link line for {target} under {build}")
    libs = sorted({os.path.basename(w) for w in re.split(r"[\s;]+", line)
                   if re.search(r"\.(a|so)(\.\d+)*$", w) or w.startswith("-l")})
    bad = [lib for lib in libs for word in forbidden
           if re.search(r"(^lib|^-l)" + re.escape(word) + r"([._-]|$)", lib)]
    print(f"{target} links: {' '.join(libs)}")
    if bad:
        sys.exit(f"{target} must not link {', '.join(sorted(set(bad)))}")


if __name__ == "__main__":
    main()
