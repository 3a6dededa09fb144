#!/usr/bin/env python3
"""Check every project #include against the dependency matrix in docs/ARCHITECTURE.md.

Usage: check_layering.py SOURCE_DIR

The matrix is the table between the markers `<!-- layering:begin -->` and `<!-- layering:end -->`: one row
per component (a folder of the tree), the components it may include besides itself, and those its tests may
also include. Every C/C++/CUDA source under a listed component is read; each `#include "..."` (and
`#include <...>` naming a project folder) is resolved to a file of the tree:
  1. relative to the including file's folder, when such a file exists (local includes);
  2. `oar/plugin/...` is the SDK (sdk/include/oar/plugin/...);
  3. otherwise relative to SOURCE_DIR (the include root of every target: "core/ops/ops.h").
The file's component and the included file's component are the longest listed folders containing them. An
include is allowed when both are the same component, or the target is in the includer's row ("tests" column
too for test sources: *_test.*, *_testing.h, test_*.*, or under a tests/ folder). Components missing from the
tree are fine (rows may name folders still to come); files under no listed component are an error, as is an
include that resolves to no component.
Exit status 0 when every include is allowed; otherwise 1, with one line per violation:
  path:line: <component> may not include "<header>" (<target component>): the edge <a> -> <b> is not in the
  matrix
"""
import os
import re
import sys

SOURCE_EXTENSIONS = (".h", ".hpp", ".c", ".cc", ".cpp", ".cu", ".cuh", ".inc")
PROJECT_ROOTS = ("core/", "oar/", "plugins/", "conformance/", "examples/", "models/", "tools/", "sdk/", "bench/")
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^">]+)[">]')
SKIP_DIRS = {".git", "build", "third_party", "testdata"}


def parse_matrix(text):
    """{component: (allowed set, allowed-in-tests set)} from the marked table."""
    match = re.search(r"<!-- layering:begin -->(.*?)<!-- layering:end -->", text, re.S)
    if not match:
        raise SystemExit("check_layering: docs/ARCHITECTURE.md has no <!-- layering:begin/end --> table")
    matrix = {}
    for line in match.group(1).splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 2 or not cells[0].startswith("`"):
            continue  # header, separator or prose
        names = [re.findall(r"`([^`]+)`", c) for c in cells]
        component = names[0][0]
        allowed = set(names[1])
        tests = set(names[2]) if len(names) > 2 else set()
        if component in matrix:
            raise SystemExit(f"check_layering: component {component} appears twice in the matrix")
        matrix[component] = (allowed, tests)
    for component, (allowed, tests) in matrix.items():
        for target in allowed | tests:
            if target not in matrix:
                raise SystemExit(f"check_layering: row {component} names {target}, which has no row of its own")
    return matrix


def component_of(path, components):
    """The longest component folder containing `path` (relative to the source dir), or None."""
    best = None
    for c in components:
        if (path == c or path.startswith(c + "/")) and (best is None or len(c) > len(best)):
            best = c
    return best


def is_test_source(path):
    name = os.path.basename(path)
    stem = name.split(".")[0]
    return (stem.endswith("_test") or stem.endswith("_testing") or stem.startswith("test_") or
            "/tests/" in "/" + path)


def resolve(source_dir, includer, header):
    local = os.path.normpath(os.path.join(os.path.dirname(includer), header))
    if os.path.exists(os.path.join(source_dir, local)):
        return local
    if header.startswith("oar/plugin/"):
        return "sdk/include/" + header
    return os.path.normpath(header)


def main(argv):
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    source_dir = os.path.abspath(argv[1])
    with open(os.path.join(source_dir, "docs", "ARCHITECTURE.md"), encoding="utf-8") as f:
        matrix = parse_matrix(f.read())
    components = list(matrix)
    roots = sorted({c.split("/")[0] for c in components})

    violations = []
    files = 0
    for root in roots:
        for dirpath, dirnames, filenames in os.walk(os.path.join(source_dir, root)):
            dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.startswith("build"))
            for name in sorted(filenames):
                if not name.endswith(SOURCE_EXTENSIONS):
                    continue
                path = os.path.relpath(os.path.join(dirpath, name), source_dir)
                own = component_of(path, components)
                if own is None:
                    violations.append(f"{path}:1: not under any component of the matrix in docs/ARCHITECTURE.md")
                    continue
                files += 1
                allowed, tests = matrix[own]
                permitted = allowed | tests if is_test_source(path) else allowed
                with open(os.path.join(source_dir, path), encoding="utf-8", errors="replace") as f:
                    for number, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        bracket, header = m.groups()
                        if bracket == "<" and not header.startswith(PROJECT_ROOTS):
                            continue  # system or third-party header
                        target = resolve(source_dir, path, header)
                        other = component_of(target, components)
                        if other is None:
                            if bracket == "<":
                                continue  # e.g. <sdk...> of a system package that happens to share a prefix
                            violations.append(f'{path}:{number}: "{header}" resolves to {target}, which is under no '
                                              "component of the matrix")
                        elif other != own and other not in permitted:
                            where = " (tests included)" if is_test_source(path) else ""
                            violations.append(f'{path}:{number}: {own} may not include "{header}" ({other}): the edge '
                                              f"{own} -> {other} is not in the matrix of docs/ARCHITECTURE.md{where}")
    for v in violations:
        print(v)
    print(f"check_layering: {files} files, {len(components)} components, {len(violations)} violation(s)")
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
