#!/usr/bin/python3
"""The include graph of the project's C modules, checked.

A module is NAME.c with NAME.h in one folder.  Fails (exit 1, naming
what is wrong) when the modules of a folder include each other in a
circle, when lib/ includes anything of nbdkit (nbdkit-*.h, except its
own nbdkit-throttle-metric.h, which includes nothing of nbdkit) or
anything of plugin/.

  include-graph.py TOP_SRCDIR
"""

import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.M)
FOLDERS = ["lib", "plugin/throttle", "plugin/disk"]


def includes(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        return INCLUDE.findall(f.read())


def module_graph(folder):
    """{module: {module it includes}} within one folder."""
    files = [f for f in os.listdir(folder) if f.endswith((".c", ".h"))]
    local = set(files)
    graph = {}
    for f in files:
        mod = f[:-2]
        graph.setdefault(mod, set())
        for kind, name in includes(os.path.join(folder, f)):
            if kind == '"' and name in local and name[:-2] != mod:
                graph[mod].add(name[:-2])
    return graph


def find_circle(graph):
    """A list of modules that form a circle, or None."""
    state = {}
    stack = []

    def visit(m):
        state[m] = 1
        stack.append(m)
        for n in sorted(graph.get(m, ())):
            if state.get(n) == 1:
                return stack[stack.index(n):] + [n]
            if n not in state:
                c = visit(n)
                if c:
                    return c
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state:
            c = visit(m)
            if c:
                return c
    return None


def main(top):
    errors = []
    plugin_files = set()
    for folder in FOLDERS[1:]:
        plugin_files |= set(os.listdir(os.path.join(top, folder)))
    for folder in FOLDERS:
        path = os.path.join(top, folder)
        circle = find_circle(module_graph(path))
        if circle:
            errors.append("%s: modules include each other in a circle: %s"
                          % (folder, " -> ".join(circle)))
    lib = os.path.join(top, "lib")
    for f in sorted(os.listdir(lib)):
        if not f.endswith((".c", ".h")):
            continue
        for kind, name in includes(os.path.join(lib, f)):
            base = os.path.basename(name)
            if (base.startswith("nbdkit-") and
                    base != "nbdkit-throttle-metric.h"):
                errors.append("lib/%s includes %s: lib/ is free of nbdkit"
                              % (f, name))
            elif kind == '"' and base in plugin_files and \
                    not os.path.exists(os.path.join(lib, base)):
                errors.append("lib/%s includes %s of plugin/" % (f, name))
    for e in errors:
        print(e)
    return 1 if errors else 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1]))
