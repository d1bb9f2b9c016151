#!/usr/bin/env python3
"""Import cycles inside each crate, at two levels: between its top-level modules (`use crate::a`
in module b makes b depend on a), and between its files (every module, `super::` paths
included; a module and its own ancestors are not an edge, since a parent holds its children and
a child may use what its parent defines). Doc comments do not count; an inline `#[cfg(test)] mod NAME { ... }` at the end
of a file does not count, nor does a file that is only a test module (declared
`#[cfg(test)] mod NAME;` in another file, with or without `#[path = "..."]`) or a file under one).

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


def without_comments(src):
    """`src` without its comment lines (doc comments included)."""
    return "\n".join(l for l in src.split("\n") if not l.lstrip().startswith("//"))


# `mod NAME;` with the attributes before it.
MOD_DECL = re.compile(r"((?:#\[[^\]]*\]\s*)*)(?:pub(?:\([^)]*\))?\s+)?mod\s+([a-z_0-9]+)\s*;")
# `#[cfg(test)]`, or `#[cfg(all(..., test, ...))]`: compiled for tests only.
CFG_TEST = re.compile(r"#\[\s*cfg\s*\(\s*(?:test|all\s*\([^\]]*\btest\b[^\]]*\))\s*\)\s*\]")
PATH_ATTR = re.compile(r'#\[\s*path\s*=\s*"([^"]+)"\s*\]')
# An inline `#[cfg(test)] mod NAME {` (a declaration `mod NAME;` is not one): the rest of the
# file is taken as tests.
INLINE_TESTS = re.compile(r"^#\[cfg\(test\)\]\s*\n(?:#\[[^\]]*\]\s*\n)*mod\s+[a-z_0-9]+\s*\{", re.M)


def test_module_files(path, src):
    """The files of the test-only modules that the file `path` declares (`#[cfg(test)] mod NAME;`,
    `#[path = "..."]` followed)."""
    d = os.path.dirname(path)
    stem = os.path.basename(path)[:-3]
    # A mod.rs, lib.rs or main.rs file finds its modules next to it; another file `a.rs` in `a/`.
    base = d if stem in ("mod", "lib", "main") else os.path.join(d, stem)
    out = []
    for attrs, name in MOD_DECL.findall(without_comments(src)):
        if not CFG_TEST.search(attrs):
            continue
        at = PATH_ATTR.search(attrs)
        if at:
            out.append(os.path.normpath(os.path.join(d, at.group(1))))
        else:
            out.append(os.path.join(base, name + ".rs"))
            out.append(os.path.join(base, name, "mod.rs"))
    return out


def sources_of(root):
    """Each non-test module of the crate at `root` and its source, the tests at its end cut."""
    texts = {}
    for d, _, files in os.walk(root):
        for f in files:
            if f.endswith(".rs"):
                p = os.path.join(d, f)
                with open(p, encoding="utf-8") as fh:
                    texts[p] = fh.read()
    # Test-only modules, and every module under one, are left out.
    tests = {
        module_of(root, t) for p, src in texts.items() for t in test_module_files(p, src) if t in texts
    }

    def in_tests(m):
        return any(m == t or m.startswith(t + "::") for t in tests)

    out = {}
    for p, src in texts.items():
        m = module_of(root, p)
        if in_tests(m):
            continue
        cut = INLINE_TESTS.search(src)
        if cut:
            src = src[: cut.start()]
        out[m] = without_comments(src)
    return out


def resolve(parts, sources):
    """The longest prefix of the path `parts` that is a module of the crate, if any."""
    return next(
        ("::".join(parts[:k]) for k in range(len(parts), 0, -1) if "::".join(parts[:k]) in sources),
        None,
    )


def edges(root):
    """Top-level module -> the top-level modules it uses."""
    sources = sources_of(root)
    top = {}
    for m, src in sources.items():
        a = m.split("::")[0]
        top.setdefault(a, set())
        for path in re.findall(r"crate::([a-z_0-9]+(?:::[a-z_0-9]+)*)", src):
            target = resolve(path.split("::"), sources)
            if target is not None and target.split("::")[0] != a:
                top[a].add(target.split("::")[0])
    return top


def related(a, b):
    """`a` and `b` are one module, or one holds the other."""
    return "crate" in (a, b) or a == b or b.startswith(a + "::") or a.startswith(b + "::")


def file_edges(root):
    """Module (file) -> the modules it uses through `crate::` or `super::` paths, leaving out its
    own ancestors and descendants."""
    sources = sources_of(root)
    graph = {}
    for m, src in sources.items():
        graph.setdefault(m, set())
        me = [] if m == "crate" else m.split("::")
        paths = [p.split("::") for p in re.findall(r"\bcrate::([a-z_0-9]+(?:::[a-z_0-9]+)*)", src)]
        for sup, p in re.findall(r"\b((?:super::)+)([a-z_0-9]+(?:::[a-z_0-9]+)*)", src):
            up = sup.count("super::")
            paths.append(me[: max(len(me) - up, 0)] + p.split("::"))
        for parts in paths:
            target = resolve(parts, sources)
            if target is not None and not related(m, target):
                graph[m].add(target)
    return graph


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
        for level, graph in (("module", edges(root)), ("file", file_edges(root))):
            for comp in cycles(graph):
                bad = True
                print(f"{root}: {level} cycle {comp}")
                for a in comp:
                    print(f"  {a} -> {sorted(x for x in graph[a] if x in comp)}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
