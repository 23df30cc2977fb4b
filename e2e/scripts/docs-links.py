#!/usr/bin/env python3
"""Fails on a dead internal link in the project's Markdown (a step of `make docs-check`).

Checked in every tracked *.md file: inline links and images (`[text](path#anchor)`,
`![alt](path)`), reference definitions (`[id]: path`) and HTML `href`/`src` attributes, outside
code. A relative target must exist; an `#anchor` must name a heading (GitHub's and mdBook's slugs,
which agree on these documents) or an explicit `id`/`name` of the target document. Links to other
sites (`http:`, `https:`, `mailto:`) are not fetched: nothing reaches the network at test time.

The book (docs/SUMMARY.md) must list every document under docs/, so no chapter is left out of
the site, and every chapter it lists must exist.

User chapters (USER_CHAPTERS: the README, the user guide and the pages a user reads, the examples'
READMEs) talk to the user, not to the project's developers: outside HTML comments and code blocks
they hold no test asides ("(Test: ...)", "(tests `name`)", a "Tests:" line, in any case; a
`<!-- tests: ... -->` marker keeps the traceability) and no path outside the repository
(`../shared`, `CAPI_SHARED_DIR`).

`docs-links.py --html DIR` checks a built book instead: every relative `href`/`src` of its pages
resolves to a file of the book, and every `#anchor` to an `id` of that page (a chapter linking
outside docs/ works on GitHub but is dead on the site).
"""

from __future__ import annotations

import html.parser
import os
import re
import subprocess
import sys
import tempfile
import urllib.parse

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
FENCE = re.compile(r"^\s*(```|~~~)")
INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
REF_DEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
HTML_ATTR = re.compile(r"""\b(?:href|src)\s*=\s*["']([^"']+)["']""")
HTML_ID = re.compile(r"""<[^>]*\b(?:id|name)\s*=\s*["']([^"']+)["']""")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.I)
USER_CHAPTERS = ["README.md", "docs/user-guide.md", "docs/plugin.md", "docs/operating.md",
                 "docs/migration-from-cluster-api-operator.md", "docs/introduction.md", "docs/from-clusterctl.md"]
TEST_TALK = re.compile(r"(?i)\(tests?(:|\s+`|\s*$)|^\s*tests?:")
OUTSIDE_REPO = re.compile(r"\.\./shared|CAPI_SHARED_DIR")
COMMENT = re.compile(r"<!--.*?-->", re.S)


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: its text lower-cased, punctuation dropped, spaces as dashes."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = re.sub(r"<[^>]+>", "", text).replace("`", "").lower()
    text = "".join(c for c in text if c.isalnum() or c in " -_")
    return text.replace(" ", "-")


def strip_code(lines: list[str]) -> list[str]:
    """The lines with fenced blocks blanked and code spans removed (links in code are text)."""
    out, fenced = [], False
    for line in lines:
        if FENCE.match(line):
            fenced = not fenced
            out.append("")
            continue
        out.append("" if fenced else re.sub(r"`[^`]*`", "", line))
    return out


def anchors(path: str, cache: dict[str, set[str]]) -> set[str]:
    """Every anchor a Markdown document defines: its headings' slugs (repeats numbered) and ids."""
    if path in cache:
        return cache[path]
    found: set[str] = set()
    seen: dict[str, int] = {}
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    for line in strip_code(lines):
        m = HEADING.match(line)
        if m:
            s = slug(m.group(2))
            n = seen.get(s, 0)
            seen[s] = n + 1
            found.add(s if n == 0 else f"{s}-{n}")
        found.update(HTML_ID.findall(line))
    # Headings hold code spans, which strip_code dropped: take them from the raw lines too.
    fenced = False
    for line in lines:
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced and (m := HEADING.match(line)):
            found.add(slug(m.group(2)))
    cache[path] = found
    return found


def targets(path: str) -> list[tuple[int, str]]:
    """(line, target) of every link, image and reference definition of a Markdown file."""
    with open(path, encoding="utf-8") as f:
        lines = strip_code(f.read().splitlines())
    out = []
    for n, line in enumerate(lines, 1):
        for m in INLINE_LINK.finditer(line):
            out.append((n, m.group(1)))
        m = REF_DEF.match(line)
        if m:
            out.append((n, m.group(1)))
        for m in HTML_ATTR.finditer(line):
            out.append((n, m.group(1)))
    return out


def check_file(path: str, root: str, cache: dict[str, set[str]]) -> list[str]:
    problems = []
    rel = os.path.relpath(path, root)
    for line, target in targets(path):
        if not target or EXTERNAL.match(target):
            continue
        where = f"{rel}:{line}: {target}"
        file_part, _, anchor = target.partition("#")
        file_part = urllib.parse.unquote(file_part)
        if file_part.startswith("/"):
            problems.append(f"{where}: an absolute path (use a path relative to the document)")
            continue
        dest = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) if file_part else path
        if not os.path.exists(dest):
            problems.append(f"{where}: {os.path.relpath(dest, root)} does not exist")
            continue
        if anchor and dest.endswith(".md") and anchor not in anchors(dest, cache):
            problems.append(f"{where}: no heading or id #{anchor} in {os.path.relpath(dest, root)}")
    return problems


# The front page is read whole by a newcomer: what it is, the quick start, links to the book.
README_MAX_LINES = 150


def is_user_chapter(rel: str) -> bool:
    parts = rel.split(os.sep)
    return rel in USER_CHAPTERS or (parts[0] == "examples" and parts[-1] == "README.md")


def check_user_chapter(path: str, root: str) -> list[str]:
    """Test asides and paths outside the repository in a user chapter's rendered text."""
    rel = os.path.relpath(path, root)
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    # Fenced blocks blanked (code spans kept: a path in one is still shown), then comments,
    # keeping their line breaks so that line numbers stay right.
    out, fenced = [], False
    for line in lines:
        if FENCE.match(line):
            fenced = not fenced
            out.append("")
        else:
            out.append("" if fenced else line)
    text = COMMENT.sub(lambda m: "\n" * m.group(0).count("\n"), "\n".join(out))
    problems = []
    if rel == "README.md" and len(lines) > README_MAX_LINES:
        problems.append(f"README.md: {len(lines)} lines; the front page keeps to {README_MAX_LINES} (move detail to docs/)")
    for n, line in enumerate(text.splitlines(), 1):
        if TEST_TALK.search(line):
            problems.append(f"{rel}:{n}: a test aside in a user chapter (make it a <!-- tests: ... --> line)")
        for m in OUTSIDE_REPO.finditer(line):
            problems.append(f"{rel}:{n}: {m.group(0)} is outside the repository; a user has no such path")
    return problems


def check_summary(root: str) -> list[str]:
    """The book lists every document under docs/, and only documents that exist."""
    summary = os.path.join(root, "docs", "SUMMARY.md")
    if not os.path.exists(summary):
        return ["docs/SUMMARY.md does not exist"]
    listed = {os.path.normpath(os.path.join(root, "docs", t.partition("#")[0])) for _, t in targets(summary)}
    problems = []
    for dirpath, _, files in os.walk(os.path.join(root, "docs")):
        for f in files:
            p = os.path.join(dirpath, f)
            if f.endswith(".md") and f != "SUMMARY.md" and p not in listed:
                problems.append(f"{os.path.relpath(p, root)} is not a chapter of the book: list it in docs/SUMMARY.md")
    return problems


def markdown_files(root: str) -> list[str]:
    r = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.md"], cwd=root,
                       capture_output=True, text=True, check=True)
    return [os.path.join(root, p) for p in sorted(set(r.stdout.split())) if os.path.exists(os.path.join(root, p))]


def check_tree(root: str, files: list[str]) -> list[str]:
    cache: dict[str, set[str]] = {}
    problems = check_summary(root)
    for f in files:
        problems += check_file(f, root, cache)
        if is_user_chapter(os.path.relpath(f, root)):
            problems += check_user_chapter(f, root)
    return problems


class _Page(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []
        self.ids: set[str] = set()
        self.base: str | None = None

    def handle_starttag(self, tag, attrs):
        if tag == "base":
            self.base = dict(attrs).get("href")
            return
        for k, v in attrs:
            if k in ("href", "src") and v:
                self.links.append(v)
            elif k in ("id", "name") and v:
                self.ids.add(v)


def check_html(book: str) -> list[str]:
    """Every relative link and asset of the built book's pages resolves inside the book."""
    pages: dict[str, _Page] = {}
    for dirpath, _, files in os.walk(book):
        for f in files:
            if f.endswith(".html"):
                p = _Page()
                with open(os.path.join(dirpath, f), encoding="utf-8") as fh:
                    p.feed(fh.read())
                pages[os.path.join(dirpath, f)] = p
    if not pages:
        return [f"{book}: no HTML pages (was the book built?)"]
    problems = []
    for page, parsed in sorted(pages.items()):
        for link in parsed.links:
            if EXTERNAL.match(link) or link.startswith("//"):
                continue
            file_part, _, anchor = link.partition("#")
            file_part = urllib.parse.unquote(file_part.partition("?")[0])
            # Site-absolute paths and pages with <base href="/..."> (404.html) start at the book's root,
            # as when the book is served at the site's root.
            base = os.path.dirname(page)
            if parsed.base and parsed.base.startswith("/"):
                base = os.path.join(book, parsed.base.lstrip("/"))
            if file_part.startswith("/"):
                base, file_part = book, file_part.lstrip("/")
            dest = os.path.normpath(os.path.join(base, file_part)) if file_part else page
            where = f"{os.path.relpath(page, book)}: {link}"
            if os.path.isdir(dest):
                dest = os.path.join(dest, "index.html")
            if not dest.startswith(os.path.abspath(book) + os.sep) or not os.path.exists(dest):
                problems.append(f"{where}: not a file of the book")
            elif anchor and dest in pages and anchor not in pages[dest].ids:
                problems.append(f"{where}: no id #{anchor} on that page")
    return problems


def self_test() -> None:
    """The checker on a known tree, so a checker that finds nothing cannot pass."""
    with tempfile.TemporaryDirectory() as d:
        os.makedirs(os.path.join(d, "docs", "img"))
        os.makedirs(os.path.join(d, "examples", "a"))
        files = {
            "README.md": "# Top\n\n[guide](docs/guide.md#install-it) [gone](docs/gone.md)\n"
                         "[bad anchor](docs/guide.md#nowhere) ![pic](docs/img/a.svg) ![lost](docs/img/b.svg)\n"
                         "`[in code](nowhere.md)`\n```\n[in a block](nowhere.md)\n(Test: `in_a_block`)\n```\n[ref]: docs/missing.md\n"
                         "Said. (Test: `aside`.)\n<!-- tests: `kept`,\n(Tests: `in_a_comment`) -->\n"
                         "Tests: `a_line`\nRefused (test\n`a_name`). Also (test `b_name`).\nSee `../shared/x` and $CAPI_SHARED_DIR.\n",
            "docs/guide.md": "# Guide\n\n## Install it\n\n## The `run` command\n\n[self](#the-run-command) "
                             "[up](../README.md#top) <a href=\"#nope\">x</a>\n(Tests: not a user chapter)\n",
            "examples/a/README.md": "# A\n\nUses ../shared/bin.\n",
            "docs/orphan.md": "# Orphan\n",
            "docs/SUMMARY.md": "# Summary\n\n- [Guide](guide.md)\n",
            "docs/img/a.svg": "<svg/>",
        }
        for name, text in files.items():
            with open(os.path.join(d, name), "w", encoding="utf-8") as f:
                f.write(text)
        got = check_tree(d, [os.path.join(d, n) for n in files if n.endswith(".md")])
        assert not any("lines; the front page" in p for p in got), got
        with open(os.path.join(d, "README.md"), "a", encoding="utf-8") as f:
            f.write("\n" * README_MAX_LINES)
        long = check_tree(d, [os.path.join(d, "README.md")])
        assert any(p.startswith("README.md: 167 lines") for p in long), long
        expected = [
            "docs/orphan.md is not a chapter",
            "README.md:3: docs/gone.md",
            "README.md:4: docs/guide.md#nowhere",
            "README.md:4: docs/img/b.svg",
            "README.md:10: docs/missing.md",
            "README.md:11: a test aside",
            "README.md:14: a test aside",
            "README.md:15: a test aside",
            "README.md:16: a test aside",
            "README.md:17: ../shared is outside",
            "README.md:17: CAPI_SHARED_DIR is outside",
            "examples/a/README.md:3: ../shared is outside",
            "docs/guide.md:7: #nope",
        ]
        for e in expected:
            assert any(p.startswith(e) for p in got), (e, got)
        assert len(got) == len(expected), got
        with open(os.path.join(d, "page.html"), "w", encoding="utf-8") as f:
            f.write('<h1 id="a">A</h1><a href="#a">ok</a><a href="#b">dead</a><a href="../x.html">out</a>'
                    '<img src="docs/img/a.svg"><a href="https://example.invalid/">far</a>')
        got = check_html(d)
        assert sorted(got) == ["page.html: #b: no id #b on that page", "page.html: ../x.html: not a file of the book"], got


def main(argv: list[str]) -> int:
    self_test()
    if argv[:1] == ["--html"]:
        if len(argv) != 2:
            print("usage: docs-links.py --html BOOK_DIR", file=sys.stderr)
            return 2
        problems = check_html(os.path.abspath(argv[1]))
        what = f"the book in {argv[1]}"
    else:
        files = [os.path.abspath(a) for a in argv] or markdown_files(ROOT)
        problems = check_tree(ROOT, files)
        what = f"{len(files)} Markdown files"
    for p in problems:
        print(f"docs-links: {p}", file=sys.stderr)
    print(f"links: {what} checked, {len(problems)} problems", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
