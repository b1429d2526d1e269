#!/usr/bin/env python3
"""The include check: the daemon's layers and the directions allowed between
them. Keep this table in step with the "Layers" section at the top of
docs/architecture.md.

A file may include headers of its own layer and of any layer below it,
never of a layer above. Only lua/ includes Lua's own headers. Every
project include ("dnslb/...", "rules/...", "lua/...") must name a file that
exists.

Within a layer, modules (foo.c with foo.h) may still include each other in a
cycle; the cycles there are today are listed in KNOWN_CYCLES, and any other
cycle (a new one, or a known one that grew) fails the check.

Prints one line per violation, "file:line: message" or "cycle: ...", and
exits 1 when there is any; otherwise prints the summary line "layers: N
files, no upward include, K known cycles" and exits 0.

Usage: check_layers.py [SOURCE_DIR]   (default: $DNSLB_SRC, else the
repository this script is in)
"""
import os
import re
import sys

# (layer number, name, path prefix); the first matching prefix wins, so the
# sub-folders of dnslb/ come before dnslb/ itself.
LAYERS = [
    (0, "core", "dnslb/core/"),
    (1, "store", "dnslb/store/"),
    (2, "rules", "rules/"),
    (3, "upstream", "dnslb/upstream/"),
    (4, "pipeline", "dnslb/pipeline/"),
    (5, "frontend", "dnslb/frontend/"),
    (6, "control", "dnslb/control/"),
    (7, "top", "dnslb/"),
    (7, "top", "lua/"),
]
LUA_HEADERS = {"lua.h", "lauxlib.h", "lualib.h", "luaconf.h"}
# Module cycles allowed within one layer. lua/ is the configuration layer on
# top: its bindings know everything and register each other.
KNOWN_CYCLES = [
    "dnslb/pipeline/dynblock dnslb/pipeline/dynblock_int",
    "dnslb/control/fleet dnslb/control/metrics",
    # the pipeline's halves: query hands slots to forward, forward finishes
    # answers through query's response path, both record in the rings, and
    # the L2 cache sits between query and forward
    "dnslb/pipeline/forward dnslb/pipeline/l2cache dnslb/pipeline/query dnslb/pipeline/rings",
    "dnslb/runtime dnslb/worker lua/abuse_lua lua/args lua/compat_lua lua/conf"
    " lua/console_lua lua/dynblock_lua lua/explain lua/fleet_lua lua/globals_lua"
    " lua/kvstore_lua lua/objects lua/redis_lua lua/rings_lua lua/rules_lua"
    " lua/stats_lua lua/web_lua lua/worker",
]
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')


def layer_of(path):
    for num, name, prefix in LAYERS:
        if path.startswith(prefix):
            return num, name
    return None


def sources(root):
    for top in ("dnslb", "rules", "lua"):
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, top)):
            dirnames.sort()
            for f in sorted(filenames):
                if f.endswith((".c", ".h")):
                    full = os.path.join(dirpath, f)
                    yield os.path.relpath(full, root).replace(os.sep, "/")


def cycles(graph):
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(" ".join(sorted(comp)))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def check(root):
    problems = []
    graph = {}
    n = 0
    for rel in sources(root):
        n += 1
        mine = layer_of(rel)
        me = os.path.splitext(rel)[0]
        graph.setdefault(me, set())
        with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as fh:
            for lineno, line in enumerate(fh, 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                kind, target = m.groups()
                where = "%s:%d" % (rel, lineno)
                if kind == "<":
                    if os.path.basename(target) in LUA_HEADERS and not rel.startswith("lua/"):
                        problems.append("%s: Lua header <%s> outside lua/" % (where, target))
                    continue
                theirs = layer_of(target)
                if theirs is None:
                    continue  # a generated or third-party header
                if not os.path.isfile(os.path.join(root, target)):
                    problems.append("%s: \"%s\" does not exist" % (where, target))
                    continue
                if os.path.splitext(target)[0] != me:
                    graph[me].add(os.path.splitext(target)[0])
                if theirs[0] > mine[0]:
                    problems.append("%s: %s (layer %d) includes \"%s\" of %s (layer %d)"
                                    % (where, mine[1], mine[0], target, theirs[1], theirs[0]))
    found = cycles(graph)
    for c in found:
        if c not in KNOWN_CYCLES:
            problems.append("cycle: %s" % c)
    return n, problems, len(found)


def main():
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    root = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("DNSLB_SRC", here)
    n, problems, ncycles = check(root)
    for p in problems:
        print(p)
    if problems:
        print("layers: %d files, %d problems" % (n, len(problems)))
        return 1
    print("layers: %d files, no upward include, %d known cycles" % (n, ncycles))
    return 0


if __name__ == "__main__":
    sys.exit(main())
