#!/usr/bin/env python3
"""Fail when modules of a crate import each other in a circle.

For every crate under crates/, the top-level modules of its src/ (and,
inside each directory module, its child modules) form a graph: an edge
a -> b when non-test code of a names b (`crate::b`, `use crate::{b, ..}`,
or for siblings `super::b`). Comments, strings and `#[cfg(test)]` items
are ignored. Any strongly connected component of more than one module is
printed and the exit status is 1.

    hack/check-modules.py            # the workspace
    hack/check-modules.py --edges    # also print every edge
"""

import os
import re
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "crates")


def strip_code(text):
    """Blank out comments, string and char literals, keeping line breaks."""
    out = []
    i, n = 0, len(text)
    blank = lambda s: re.sub(r"[^\n]", " ", s)
    while i < n:
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(blank(text[i:j]))
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
            out.append(blank(text[i:j]))
            i = j
        elif (m := re.match(r'b?r(#*)"', text[i:])) and (
            i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")
        ):
            end = '"' + m.group(1)
            j = text.find(end, i + len(m.group(0)))
            j = n if j < 0 else j + len(end)
            out.append(blank(text[i:j]))
            i = j
        elif text[i] == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append(blank(text[i : j + 1]))
            i = j + 1
        elif m := re.match(r"'(\\u\{[0-9a-fA-F]+\}|\\x..|\\.|[^\\'\n])'", text[i:]):
            out.append(blank(m.group(0)))
            i += len(m.group(0))
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def strip_cfg_test(text):
    """Blank out every item annotated `#[cfg(test)]`."""
    chars = list(text)
    for m in re.finditer(r"#\[cfg\(test\)\]", text):
        j = m.end()
        while j < len(text) and text[j] not in "{;":
            j += 1
        end = j + 1
        if j < len(text) and text[j] == "{":
            depth = 0
            for k in range(j, len(text)):
                depth += {"{": 1, "}": -1}.get(text[k], 0)
                if depth == 0:
                    end = k + 1
                    break
        for k in range(m.start(), min(end, len(text))):
            if chars[k] != "\n":
                chars[k] = " "
    return "".join(chars)


def use_heads(tree):
    """The first path segment of each path in a `use crate::...` tree."""
    tree = tree.strip()
    if tree.startswith("{"):
        inner, depth, part, heads = tree[1:-1], 0, "", []
        for ch in inner + ",":
            depth += {"{": 1, "}": -1}.get(ch, 0)
            if ch == "," and depth == 0:
                if part.strip():
                    heads.append(re.match(r"\s*(\w+)", part).group(1))
                part = ""
            else:
                part += ch
        return heads
    return [re.match(r"(\w+)", tree).group(1)]


def module_files(src):
    """{module path (tuple): source text} for every file of a crate."""
    mods = {}
    for dirpath, _, files in os.walk(src):
        for f in files:
            if not f.endswith(".rs"):
                continue
            rel = os.path.relpath(os.path.join(dirpath, f), src)[:-3].split(os.sep)
            if rel[-1] == "mod":
                rel = rel[:-1]
            if rel in (["lib"], ["main"]):
                rel = []
            with open(os.path.join(dirpath, f)) as fh:
                mods[tuple(rel)] = strip_cfg_test(strip_code(fh.read()))
    return mods


def edges(mods):
    """(from, to) pairs between sibling modules."""
    found = set()
    for path, text in mods.items():
        if not path:
            continue
        refs = set()
        for m in re.finditer(r"\buse\s+crate::(\{[^;]*\}|[\w:]+)", text):
            refs |= {(h,) for h in use_heads(m.group(1))}
        for m in re.finditer(r"\bcrate::(\w+(?:::\w+)*)", text):
            refs.add(tuple(m.group(1).split("::")))
        # a child's `super::x` names its sibling x
        for m in re.finditer(r"\buse\s+super::(\{[^;]*\}|[\w:]+)", text):
            refs |= {path[:-1] + (h,) for h in use_heads(m.group(1))}
        for m in re.finditer(r"\bsuper::(\w+)", text):
            refs.add(path[:-1] + (m.group(1),))
        for ref in refs:
            # the sibling of some ancestor of `path` that `ref` names
            for depth in range(len(path)):
                if ref[:depth] != path[:depth] or len(ref) <= depth:
                    break
                target = ref[: depth + 1]
                if target != path[: depth + 1] and target in mods:
                    found.add((path[: depth + 1], target))
                    break
    return found


def circles(graph_edges):
    """Strongly connected components of more than one node (Tarjan)."""
    graph = {}
    for a, b in graph_edges:
        graph.setdefault(a, set()).add(b)
        graph.setdefault(b, set())
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
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

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def main():
    show = "--edges" in sys.argv
    failed = False
    for crate in sorted(os.listdir(ROOT)):
        src = os.path.join(ROOT, crate, "src")
        if not os.path.isdir(src):
            continue
        found = edges(module_files(src))
        if show:
            for a, b in sorted(found):
                print(f"{crate}: {'::'.join(a)} -> {'::'.join(b)}")
        for comp in circles(found):
            failed = True
            names = ", ".join("::".join(c) for c in comp)
            print(f"{crate}: modules import each other in a circle: {names}")
            for a, b in sorted(found):
                if a in comp and b in comp:
                    print(f"    {'::'.join(a)} -> {'::'.join(b)}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
