#!/usr/bin/env python3
"""The operator's controller modules import one another without circles (run by `make clippy`).

Reads crates/operator/src/controller/: for each top-level module (a file or a directory), the
sibling modules it names through `crate::controller::` or the `super::` chain that leads back
to the controller (`super::` in a top-level file or a folder's mod.rs, `super::super::` in a
file of a folder) outside comments and unit tests. Prints the graph; fails naming each circle.
`testing` (test-only code) is left out: it drives everything. Rust allows circles between
modules of a crate, so this is kept for the controller's modules; between crates (the decision
layer is the crate capi-decide) the compiler refuses them itself.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

CONTROLLER = Path(__file__).resolve().parents[2] / "crates" / "operator" / "src" / "controller"


def top_level_names(tree: str) -> list[str]:
    """The first path segment of each item of a `{...}` use tree."""
    depth, cur, names = 0, "", []
    for c in tree[1:-1]:
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
        elif c == "," and depth == 0:
            names.append(cur)
            cur = ""
            continue
        cur += c
    names.append(cur)
    return [n.split("::")[0].strip() for n in names if n.strip()]


def imports(path: Path, depth: int) -> set[str]:
    """The controller modules `path` names; `depth` is how many `super::` lead to the controller."""
    text = path.read_text().split("#[cfg(test)]\nmod tests")[0]
    text = "\n".join(line.split("//")[0] for line in text.splitlines())
    found = set(re.findall(r"crate::controller::(\w+)", text))
    up = "super::" * depth
    for m in re.finditer(r"(?<!::)" + up + r"(\{[^;]*\}|\w+)", text):
        tree = m.group(1)
        found.update(top_level_names(tree) if tree.startswith("{") else [tree])
    return found - {"super", "self"}


def graph() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {}
    for path in sorted(CONTROLLER.rglob("*.rs")):
        parts = path.relative_to(CONTROLLER).with_suffix("").parts
        if parts == ("mod",) or parts[0] == "testing":
            continue
        top = parts[0]
        depth = len(parts) - 1 if parts[-1] == "mod" else len(parts)
        edges.setdefault(top, set()).update(imports(path, depth))
    return {m: {d for d in deps if d in edges and d != m} for m, deps in edges.items()}


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    found, state, stack = [], {}, []

    def visit(u: str) -> None:
        state[u] = 1
        stack.append(u)
        for v in sorted(edges[u]):
            if state.get(v) == 1:
                found.append(stack[stack.index(v):] + [v])
            elif v not in state:
                visit(v)
        stack.pop()
        state[u] = 2

    for u in sorted(edges):
        if u not in state:
            visit(u)
    return found


def main() -> int:
    edges = graph()
    for m in sorted(edges):
        print(f"  {m} -> {', '.join(sorted(edges[m])) or '-'}")
    found = circles(edges)
    for c in found:
        print(f"import circle in crates/operator/src/controller: {' -> '.join(c)}", file=sys.stderr)
    if not found:
        print(f"controller modules: {len(edges)}, no import circles")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
