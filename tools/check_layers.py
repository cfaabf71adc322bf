#!/usr/bin/env python3
"""Checks the dataplane crate's layering (docs/design.md, "Layers"): exits 1 naming each fault.

- The packet core's modules (dataplane/src/packet/*) import one another without a cycle.
- The runtime's modules (dataplane/src/runtime/*) import one another without a cycle.
- Inside each module's folder, the files import one another without a cycle (a folder's
  mod.rs, which declares the others and holds what they share, is left out).
- Nothing in the packet core imports `config`, the runtime or `dpdk_sys`.
- `config` imports nothing of the runtime, and only `runtime/dpdk/` names `dpdk_sys`.

Test code is left out: files named tests.rs or *_tests.rs, folders named tests, and every
`#[cfg(test)]` item (a `mod tests;`, or a block to its closing brace, on a line of its own or
not). An import is a path `crate::m` or `crate::packet::m` / `crate::runtime::m` (also inside
`use crate::{a, b::c}`), or `super::m` in a file that sits directly in packet/ or runtime/.
Comments (`//`, `/* */`) and the contents of string and char literals are skipped.

Usage: tools/check_layers.py [ROOT]   (ROOT: the repository, by default this file's parent's)
Runs with the first `python3` on PATH (standard library only).
"""

import os
import re
import sys


def modules(src, layer):
    """The top-level modules of `src/layer`: file stems and folder names."""
    out = set()
    for e in os.listdir(os.path.join(src, layer)):
        if e == "mod.rs":
            continue
        if e.endswith(".rs"):
            out.add(e[:-3])
        elif os.path.isdir(os.path.join(src, layer, e)):
            out.add(e)
    return out


def is_test_file(path):
    base = os.path.basename(path)
    return base == "tests.rs" or base.endswith("_tests.rs") or "/tests/" in path


RAW = re.compile(r'b?r(#*)"')


def blank_literals(text):
    """`text` with its comments (`//` to the end of the line, `/* */` nested) and the contents
    of its string, raw string, byte string and char literals made spaces (newlines kept, so
    offsets and lines stay); lifetimes (`'a`) are left as they are."""
    out, i, n = [], 0, len(text)

    def blank(a, b):
        out.append(re.sub(r"[^\n]", " ", text[a:b]))

    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            blank(i, j)
            i = j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            blank(i, j)
            i = j
        elif c in "br" and (m := RAW.match(text, i)) and not (i and (text[i - 1].isalnum() or text[i - 1] == "_")):
            end = '"' + m.group(1)
            j = text.find(end, i + m.end())
            j = n if j < 0 else j + len(end)
            out.append(text[i:i + m.end()])
            blank(i + m.end(), j)
            i = j
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append('"')
            blank(i + 1, min(j, n))
            out.append('"' if j < n else "")
            i = j + 1
        elif c == "'":
            # A char literal ('x', '\n', '\'', '\u{7b}'), else a lifetime or a label.
            m = re.match(r"'(?:\\u\{[0-9a-fA-F_]*\}|\\x[0-9a-fA-F]{2}|\\.|[^\\'\n])'", text[i:i + 16])
            if m:
                out.append("'")
                blank(i + 1, i + m.end() - 1)
                out.append("'")
                i += m.end()
            else:
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def item_end(text, i):
    """The offset just past the item that starts at or after `i` (after its attributes): its
    first `;` outside brackets, or the brace that closes its first `{`."""
    n = len(text)
    while True:
        m = re.compile(r"\s*#!?\[").match(text, i)
        if not m:
            break
        depth, j = 0, m.end() - 1
        while j < n:
            depth += {"[": 1, "]": -1}.get(text[j], 0)
            j += 1
            if depth == 0:
                break
        i = j
    depth = 0
    while i < n:
        c = text[i]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
            if depth == 0 and c == "}":
                return i + 1
        elif c == ";" and depth == 0:
            return i + 1
        i += 1
    return n


def code_of(path):
    """The file's text without comments, without the contents of its literals, and without its
    test items: each `#[cfg(test)]` item (a `mod tests;`, or a block to its closing brace),
    wherever it stands, on a line of its own or not."""
    with open(path) as f:
        text = blank_literals(f.read())
    out, at = [], 0
    for m in re.finditer(r"#\[\s*cfg\s*\(\s*test\s*\)\s*\]", text):
        if m.start() < at:
            continue
        out.append(text[at:m.start()])
        at = item_end(text, m.end())
        out.append("\n" * text.count("\n", m.start(), at))
    out.append(text[at:])
    return "".join(out)


def imported(text, direct):
    """Top-level names that `text` imports through `crate::` (and `super::` when `direct`),
    each with the path as written up to that name (`crate::runtime::engine`, `super::wire`)."""
    names = {}
    for m in re.finditer(r"crate::(?:(packet|runtime)::)?\{([^;]*?)\}", text, re.S):
        for part in m.group(2).split(","):
            head = part.strip().split("::")[0].strip()
            if head:
                names.setdefault(head, "crate::" + (m.group(1) + "::" if m.group(1) else "") + head)
    for m in re.finditer(r"crate::(?:(?:packet|runtime)::)?([a-z_][a-z0-9_]*)", text):
        names.setdefault(m.group(1), m.group(0))
    if direct:
        for m in re.finditer(r"(?<![:\w])super::([a-z_][a-z0-9_]*)", text):
            names.setdefault(m.group(1), m.group(0))
    return names


def owner(src, path, layer_mods):
    """(layer, module) of `path`, or (layer, None) for a file directly in the layer's folder."""
    rel = os.path.relpath(path, src).split(os.sep)
    if rel[0] in layer_mods and len(rel) >= 2:
        stem = rel[1][:-3] if rel[1].endswith(".rs") else rel[1]
        return rel[0], (None if stem == "mod" else stem)
    return rel[0] if len(rel) > 1 else None, None


def cycles(graph):
    """Every cycle's nodes, one list per strongly connected component of two or more."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
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

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def sibling_edges(src, path, text):
    """The sibling files (or folders) of `path`, in its own module folder, that it imports:
    `super::x`, or `crate::[packet::|runtime::]a::b::x` naming its folder's module path."""
    folder = os.path.dirname(path)
    if os.path.basename(path) == "mod.rs":
        return set()
    siblings = {e[:-3] if e.endswith(".rs") else e for e in os.listdir(folder)} - {"mod", "tests"}
    rel = os.path.relpath(folder, src).split(os.sep)
    if rel[0] not in ("packet", "runtime") or len(rel) < 2:
        return set()
    modpath = "::".join(rel[1:])
    names = {m.group(1) for m in re.finditer(r"(?<![:\w])super::([a-z_][a-z0-9_]*)", text)}
    pat = r"crate::(?:(?:packet|runtime)::)?" + re.escape(modpath) + r"::([a-z_][a-z0-9_]*)"
    names |= {m.group(1) for m in re.finditer(pat, text)}
    for m in re.finditer(r"(?<![:\w])super::\{([^;]*?)\}", text, re.S):
        names |= {p.strip().split("::")[0].strip() for p in m.group(1).split(",")}
    stem = os.path.basename(path)[:-3]
    return (names & siblings) - {stem}


def check(root):
    src = os.path.join(root, "dataplane", "src")
    mods = {"packet": modules(src, "packet"), "runtime": modules(src, "runtime")}
    graph = {"packet": {}, "runtime": {}}
    files = {}  # folder -> {file stem -> sibling stems it imports}
    faults = []
    for d, _, names in os.walk(src):
        for f in names:
            path = os.path.join(d, f)
            if not f.endswith(".rs") or is_test_file(path):
                continue
            text = code_of(path)
            rel = os.path.relpath(path, src)
            layer, mod = owner(src, path, mods)
            uses = imported(text, direct=mod is not None and os.path.dirname(rel) == layer)
            if "dpdk_sys" in text and not rel.startswith(os.path.join("runtime", "dpdk") + os.sep):
                faults.append(f"{rel}: names dpdk_sys (only runtime/dpdk/ may)")
            if layer == "packet":
                for bad in sorted(uses.keys() & ({"config", "runtime"} | mods["runtime"])):
                    faults.append(f"{rel}: the packet core imports the runtime or config ({uses[bad]})")
            if layer == "config":
                for bad in sorted(uses.keys() & ({"runtime"} | mods["runtime"])):
                    faults.append(f"{rel}: config imports the runtime ({uses[bad]})")
            if layer in graph and mod is not None:
                deps = graph[layer].setdefault(mod, set())
                deps.update(n for n in uses.keys() & mods[layer] if n != mod)
            if layer in graph:
                folder = os.path.relpath(d, src)
                files.setdefault(folder, {})[f[:-3]] = sibling_edges(src, path, text)
    for layer, g in graph.items():
        faults += cycle_faults(g, f"{layer}: an import cycle among")
    for folder, g in sorted(files.items()):
        faults += cycle_faults(g, f"{folder}/: an import cycle among the files")
    return faults, graph


def cycle_faults(graph, what):
    """One message per cycle of `graph`: `what`, its nodes, and the edges between them."""
    out = []
    for c in cycles(graph):
        edges = [f"{a} -> {b}" for a in c for b in sorted(graph.get(a, ())) if b in c]
        out.append(f"{what} {', '.join(c)} ({'; '.join(edges)})")
    return out


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    faults, graph = check(root)
    for f in faults:
        print(f"check_layers: {f}", file=sys.stderr)
    if faults:
        sys.exit(1)
    n = sum(len(g) for g in graph.values())
    print(f"check_layers: {n} modules of packet/ and runtime/, no cycle; the core imports no runtime")


if __name__ == "__main__":
    main()
