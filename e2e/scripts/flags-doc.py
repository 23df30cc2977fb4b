#!/usr/bin/env python3
"""Writes the table of the operator's flags into docs/operating.md from `run --help`.

    capi-provider-operator run --help | flags-doc.py [--check]

The table sits between the markers `<!-- flags:begin -->` and `<!-- flags:end -->`. With
--check nothing is written: the exit status is 1 when the page's table differs from the help
(`make check-generated`; `make docs` writes it). The help is clap's long form: a line per flag,
then its indented description with `[env: ...]`, `[default: ...]` and `[possible values: ...]`.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

PAGE = Path(__file__).resolve().parents[2] / "docs" / "operating.md"
BEGIN, END = "<!-- flags:begin -->", "<!-- flags:end -->"


def flags(help_text: str) -> list[tuple[str, str]]:
    """(flag with its value name, description) of every option but --help."""
    out: list[tuple[str, str]] = []
    for line in help_text.splitlines():
        m = re.match(r"^\s+(?:-\w, )?(--[a-z0-9-]+(?: <[^>]+>)?)\s*$", line)
        if m:
            out.append((m.group(1), ""))
        elif out and line.startswith(" " * 10):
            flag, text = out[-1]
            out[-1] = (flag, (text + " " + line.strip()).strip())
    return [(f, d) for f, d in out if not f.startswith("--help")]


def table(help_text: str) -> str:
    rows = ["| flag | environment | default | what it does |", "|---|---|---|---|"]
    for flag, desc in flags(help_text):
        env = re.search(r"\[env: ([A-Z0-9_]+)=[^\]]*\]", desc)
        default = re.search(r"\[default: ([^\]]*)\]", desc)
        desc = re.sub(r"\s*\[(env|default|possible values): [^\]]*\]", "", desc).replace("|", "\\|")
        rows.append(f"| `{flag}` | {f'`{env.group(1)}`' if env else ''} | "
                    f"{f'`{default.group(1)}`' if default else ''} | {desc} |")
    return "\n".join(rows)


def main() -> int:
    check = "--check" in sys.argv[1:]
    help_text = sys.stdin.read()
    if not flags(help_text):
        print("flags-doc: no flags in the help given on stdin", file=sys.stderr)
        return 2
    page = PAGE.read_text(encoding="utf-8")
    start, end = page.find(BEGIN), page.find(END)
    if start < 0 or end < start:
        print(f"flags-doc: {PAGE} lacks the markers {BEGIN} ... {END}", file=sys.stderr)
        return 2
    new = page[: start + len(BEGIN)] + "\n" + table(help_text) + "\n" + page[end:]
    if check:
        if new != page:
            print("docs/operating.md's flag table is stale: run 'make docs'", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
