#!/usr/bin/env python3
"""Keeps docs/architecture.md current (run by `make docs-check`).

Fails when the page names a crate directory, a crate package or an operator controller module
that does not exist, or when a crate of the workspace or a module of
crates/operator/src/controller/ is missing from the page.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "architecture.md"
CONTROLLER = ROOT / "crates" / "operator" / "src" / "controller"


def crates() -> dict[str, str]:
    """Crate directory -> package name, for every crate of the workspace."""
    found = {}
    for manifest in sorted((ROOT / "crates").glob("*/Cargo.toml")):
        m = re.search(r'^name\s*=\s*"([^"]+)"', manifest.read_text(), re.M)
        if m:
            found[manifest.parent.name] = m.group(1)
    return found


def controller_modules() -> set[str]:
    """The modules declared in controller/mod.rs."""
    text = (CONTROLLER / "mod.rs").read_text()
    return set(re.findall(r"^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;", text, re.M))


def table_modules(text: str) -> set[str]:
    """The modules the page's module table names (first column, backticked)."""
    names = set()
    for line in text.splitlines():
        if line.startswith("| `"):
            first = line.split("|")[1]
            names.update(re.findall(r"`(\w+)`", first))
    return names


def main() -> int:
    text = PAGE.read_text()
    problems = []
    workspace = crates()
    for d in sorted(set(re.findall(r"crates/([\w-]+)", text))):
        if d not in workspace:
            problems.append(f"names crates/{d}, which does not exist")
    for d, package in workspace.items():
        if f"crates/{d}" not in text:
            problems.append(f"does not name crate crates/{d}")
        if package not in text:
            problems.append(f"does not name package {package} (crates/{d})")
    for package in sorted(set(re.findall(r"(?<!kubectl )\b(capi-[a-z-]+[a-z])\b", text))):
        if package not in workspace.values():
            problems.append(f"names package {package}, which no crate is called")
    declared, named = controller_modules(), table_modules(text)
    for m in sorted(named - declared):
        problems.append(f"names controller module `{m}`, which controller/mod.rs does not declare")
    for m in sorted(declared - named):
        problems.append(f"does not name controller module `{m}` in its module table")
    for p in problems:
        print(f"docs/architecture.md {p}", file=sys.stderr)
    if not problems:
        print(f"docs/architecture.md: {len(workspace)} crates, {len(declared)} controller modules, current")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
