#!/usr/bin/env python3
"""Import cycles between the top-level modules of each crate (`use crate::a` in module b makes
b depend on a; doc comments do not count; a `#[cfg(test)] mod tests` at the end of a file does
not count).

usage: scripts/module_cycles.py [CRATE_SRC_DIR...]   (default: every crate's src/)
Exits 1 when a crate has a cycle, listing the modules of each cycle and their edges.
"""
import os
import re
import sys


def module_of(root, path):
    parts = os.path.relpath(path, root)[:-3].split(os.sep)
    if parts[-1] in ("mod", "lib", "main"):
        parts = parts[:-1]
    return "::".join(parts) or "crate"


def edges(root):
    sources = {}
    for d, _, files in os.walk(root):
        for f in files:
            if f.endswith(".rs"):
                p = os.path.join(d, f)
                with open(p, encoding="utf-8") as fh:
                    sources[module_of(root, p)] = fh.read()
    top = {}
    for m, src in sources.items():
        cut = src.find("#[cfg(test)]\nmod tests")
        if cut >= 0:
            src = src[:cut]
        src = "\n".join(l for l in src.split("\n") if not l.lstrip().startswith("//"))
        a = m.split("::")[0]
        top.setdefault(a, set())
        for path in re.findall(r"crate::([a-z_0-9]+(?:::[a-z_0-9]+)*)", src):
            parts = path.split("::")
            target = next(
                ("::".join(parts[:k]) for k in range(len(parts), 0, -1) if "::".join(parts[:k]) in sources),
                None,
            )
            if target is not None and target.split("::")[0] != a:
                top[a].add(target.split("::")[0])
    return top


def cycles(graph):
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in graph:
                continue
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
                out.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def main():
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    roots = sys.argv[1:] or sorted(
        os.path.join(here, d, "src") for d in os.listdir(here) if os.path.isdir(os.path.join(here, d, "src"))
    )
    bad = False
    for root in roots:
        graph = edges(root)
        for comp in cycles(graph):
            bad = True
            print(f"{root}: cycle {comp}")
            for a in comp:
                print(f"  {a} -> {sorted(x for x in graph[a] if x in comp)}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
