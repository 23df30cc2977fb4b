#!/usr/bin/env python3
"""Fails when a test could report `ok` without doing its work (run by `make clippy`).

A test that cannot run must fail, or be `#[ignore = "reason"]`d so that libtest's summary counts
it: a test that prints "SKIPPED" and returns hides its skip, since libtest shows the output of
passing tests to nobody. So no Rust source of the workspace may print SKIPPED, and every
`#[ignore]` carries its reason, which is the one reason make test knows: the test compares with
the published files of ../shared, and runs where they are.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SKIP = re.compile(r'"[^"\n]*\bSKIPPED\b')
BARE_IGNORE = re.compile(r"#\[ignore\]")
IGNORE = re.compile(r'#\[ignore\s*=\s*"([^"]*)')
# make test runs the ignored tests (--include-ignored) where the published files are, so an
# ignore means exactly that and nothing else.
PUBLISHED = "needs the published files of ../shared"


def main() -> int:
    failures = []
    for path in sorted(ROOT.glob("crates/**/*.rs")) + sorted(ROOT.glob("fuzz/**/*.rs")):
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            where = f"{path.relative_to(ROOT)}:{n}"
            if SKIP.search(line):
                failures.append(f"{where}: prints SKIPPED: fail instead, or #[ignore = \"why\"] the test")
            if BARE_IGNORE.search(line):
                failures.append(f"{where}: #[ignore] without its reason")
            m = IGNORE.search(line)
            if m and not m.group(1).startswith(PUBLISHED):
                failures.append(f"{where}: an #[ignore] here means only \"{PUBLISHED} ...\"")
    for f in failures:
        print(f, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
