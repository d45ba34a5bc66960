#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""The include graph of the project's C modules, checked.

A module is NAME.c with NAME.h in one folder.  Fails (exit 1, naming
what is wrong) when the modules of a folder (with the folders below
it: the filter's are one program) include each other in a circle (every set of modules that do, each with its shortest circle,
so that one run shows all there is to untangle), when lib/ includes
anything of nbdkit (nbdkit-*.h, except its own nbdkit-throttle-metric.h,
which must itself include nothing of nbdkit) or anything of plugin/.

  include-graph.py TOP_SRCDIR
"""

import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.M)
FOLDERS = ["lib", "plugin/throttle", "plugin/disk"]

# The filter's folders from the bottom up: a file includes headers of
# its own folder and of those below it, never above (the guards below
# everything that reports on them, the reporting on top).  The core is
# at the bottom but for what still calls the features by name, until
# they attach through an interface of the core's (issue 39): nbdkit's
# callbacks and the serving of a request.
LAYERS = ["params", "core", "compat", "guards", "writeback", "adapt", "control"]
# The features attach to the core through core/throttle-feature.h and
# the table plugin/throttle/throttle-features.c (outside the folders):
# the core includes no feature's header.
LAYER_EXCEPTIONS = set()
# The one seam for old nbdkit (compat/throttle-compat.h): every folder
# may include it, the core's data path too.
SEAMS = {"throttle-compat.h"}


def includes(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        return INCLUDE.findall(f.read())


def sources(folder):
    """{file name: path} of the .c and .h files in folder and the
    folders below it: one program's headers, found by their bare names
    (the filter's folders are each on its include path)."""
    found = {}
    for d, _, names in os.walk(folder):
        for f in names:
            if f.endswith((".c", ".h")):
                found[f] = os.path.join(d, f)
    return found


def module_graph(folder):
    """{module: {module it includes}} within one folder and those below
    it."""
    files = sources(folder)
    graph = {}
    for f, path in files.items():
        mod = f[:-2]
        graph.setdefault(mod, set())
        for kind, name in includes(path):
            if kind == '"' and name in files and name[:-2] != mod:
                graph[mod].add(name[:-2])
    return graph


def tangles(graph):
    """The sets of modules that include each other (the strongly
    connected components of more than one module), each sorted, in
    the order of their first module."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(m):
        index[m] = low[m] = len(index)
        stack.append(m)
        on_stack.add(m)
        for n in sorted(graph.get(m, ())):
            if n not in index:
                visit(n)
                low[m] = min(low[m], low[n])
            elif n in on_stack:
                low[m] = min(low[m], index[n])
        if low[m] == index[m]:
            comp = []
            while True:
                n = stack.pop()
                on_stack.discard(n)
                comp.append(n)
                if n == m:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for m in sorted(graph):
        if m not in index:
            visit(m)
    return sorted(found)


def shortest_circle(graph, tangle):
    """The shortest circle through the tangle's first module, as a
    list that starts and ends with it."""
    start, inside = tangle[0], set(tangle)
    came_from = {start: None}
    queue = [start]
    for m in queue:
        for n in sorted(graph[m] & inside):
            if n == start:
                path = [m]
                while came_from[path[-1]] is not None:
                    path.append(came_from[path[-1]])
                return list(reversed(path)) + [start]
            if n not in came_from:
                came_from[n] = m
                queue.append(n)
    raise AssertionError("a tangle without a circle")


def layer_errors(filter_dir):
    """Includes of a header from a folder above the including file's
    (LAYERS), outside LAYER_EXCEPTIONS, but for the SEAMS."""
    if not all(os.path.isdir(os.path.join(filter_dir, d)) for d in LAYERS):
        return []
    layer = {}
    for i, d in enumerate(LAYERS):
        for f in os.listdir(os.path.join(filter_dir, d)):
            layer[f] = i
    errors = []
    for i, d in enumerate(LAYERS):
        for f in sorted(os.listdir(os.path.join(filter_dir, d))):
            if not f.endswith((".c", ".h")) or d + "/" + f in LAYER_EXCEPTIONS:
                continue
            for kind, name in includes(os.path.join(filter_dir, d, f)):
                if kind == '"' and name not in SEAMS and \
                   layer.get(name, i) > i:
                    errors.append("plugin/throttle/%s/%s includes %s of %s/, "
                                  "a folder above %s/" %
                                  (d, f, name, LAYERS[layer[name]], d))
    return errors


def main(top):
    errors = []
    plugin_files = set()
    for folder in FOLDERS[1:]:
        plugin_files |= set(sources(os.path.join(top, folder)))
    for folder in FOLDERS:
        path = os.path.join(top, folder)
        graph = module_graph(path)
        for tangle in tangles(graph):
            circle = shortest_circle(graph, tangle)
            errors.append("%s: modules include each other in a circle: %s"
                          % (folder, " -> ".join(circle)))
            # Breaking that circle may leave others among the rest.
            if len(tangle) > len(circle) - 1:
                errors.append("%s: these modules all lie on circles "
                              "through each other: %s"
                              % (folder, ", ".join(tangle)))
    errors += layer_errors(os.path.join(top, "plugin/throttle"))
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
