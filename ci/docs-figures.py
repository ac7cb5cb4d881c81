#!/usr/bin/env python3
"""The docs agree with themselves (issue 55): what a machine can check.

Reads README.md and docs/*.md, and ci/figures.tsv, and checks three rules:

  paths    no link or example path leaves the repository. A link climbs from
           its page's folder; a path in a code block or a code span climbs
           from the repository's root (the commands run there), or, in a
           block whose first line is a comment naming a file
           (`# deploy/mine/kustomization.yaml`), from that file's folder.
  stamps   every docs page's first table names a build (a short commit hash)
           and a date (YYYY-MM-DD) in its rows or in the paragraph just
           above or below it. Pages whose first table holds no measured
           figure are listed in NO_FIGURES below, with the reason.
  figures  one figure, one owner: each key figure in ci/figures.tsv is
           stated on its owning page, and every quote of it on any page
           (found by that row's context and capture patterns) is one of
           the values the table records for that quantity.

Prints each problem as FILE:LINE: what, then a summary; exits 1 if any rule
is broken, 0 if none is, 2 if it cannot run. Python 3 standard library only;
it reads about 170 KB of text and runs in well under a second.
"""

import csv
import fnmatch
import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIGURES = ROOT / "ci" / "figures.tsv"

# Pages whose first table holds no measured figure, so no build or date.
NO_FIGURES = {
    "docs/harness.md": "its first table lists the attacks and their bounds",
}

BUILD = re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,12}\b")
DATE = re.compile(r"\b20\d\d-[01]\d-[0-3]\d\b")
LINK = re.compile(r"\]\(([^)\s]+)\)")
CLIMB = re.compile(r"(?<![\w./-])((?:\.\./)+)([\w.-]*)")
FILE_COMMENT = re.compile(r"^\s*(?:#|//)\s*([\w.-]+(?:/[\w.-]+)+)")


def pages():
    found = [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))
    return [p for p in found if p.is_file()]


def name(path):
    return path.relative_to(ROOT).as_posix()


def leaves(base, climb):
    """True when `climb` (a run of ../) from folder `base` leaves ROOT."""
    try:
        depth = len(base.relative_to(ROOT).parts)
    except ValueError:  # a block that names a file outside the repository
        return True
    return climb.count("../") > depth


def check_paths(page, lines):
    problems = []
    fenced, block_base = False, ROOT
    for number, line in enumerate(lines, 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            block_base = ROOT
            if fenced and number < len(lines):
                named = FILE_COMMENT.match(lines[number])
                if named:
                    block_base = Path(os.path.normpath(ROOT / named.group(1))).parent
            continue
        if fenced:
            spans = [(line, block_base)]
        else:
            links = [(m.group(1), page.parent) for m in LINK.finditer(line)]
            codes = [(c, ROOT) for c in line.split("`")[1::2]]
            spans = links + codes
        for text, base in spans:
            for m in CLIMB.finditer(text):
                if leaves(base, m.group(1)):
                    problems.append(
                        f"{name(page)}:{number}: paths: `{m.group(0)}` climbs out of "
                        f"the repository (from {os.path.relpath(base, ROOT)}/)"
                    )
    return problems


def first_table(lines):
    """(first row index, last row index) of the first table outside code."""
    fenced = False
    for i, line in enumerate(lines):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith("|"):
            end = i
            while end + 1 < len(lines) and lines[end + 1].startswith("|"):
                end += 1
            return i, end
    return None


def paragraph(lines, start, step):
    """The non-blank lines next to a table, skipping one blank line."""
    i = start + step
    if 0 <= i < len(lines) and not lines[i].strip():
        i += step
    found = []
    while 0 <= i < len(lines) and lines[i].strip() and not lines[i].startswith("#"):
        found.append(lines[i])
        i += step
    return found


def check_stamp(page, lines):
    if not name(page).startswith("docs/") or name(page) in NO_FIGURES:
        return []
    table = first_table(lines)
    if table is None:
        return []
    start, end = table
    text = "\n".join(
        paragraph(lines, start, -1) + lines[start : end + 1] + paragraph(lines, end, 1)
    )
    missing = [what for what, rule in (("build", BUILD), ("date", DATE)) if not rule.search(text)]
    if not missing:
        return []
    return [
        f"{name(page)}:{start + 1}: stamps: the first table names no "
        f"{' and no '.join(missing)} in its rows or caption"
    ]


def blocks(lines):
    """(line number, text): each table row and each code line alone, prose
    joined into paragraphs, so a quote wrapped over lines is one text."""
    out, held, held_at, fenced = [], [], 0, False
    for number, line in enumerate(lines, 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        lone = fenced or line.startswith("|") or line.startswith("#")
        if lone or not line.strip():
            if held:
                out.append((held_at, " ".join(held)))
                held = []
            if lone:
                out.append((number, line))
            continue
        if not held:
            held_at = number
        held.append(line.strip())
    if held:
        out.append((held_at, " ".join(held)))
    return out


def load_figures():
    with FIGURES.open(newline="") as f:
        rows = [r for r in csv.DictReader((l for l in f if not l.startswith("#")), delimiter="\t", quoting=csv.QUOTE_NONE)]
    for r in rows:
        r["context_re"] = re.compile(r["context"])
        r["capture_re"] = re.compile(r["capture"])
    return rows


def normal(value):
    """A figure as digits: `×8.05`, `7,187` and `64.1 KiB` as written here;
    words such as "about three times" reduce to nothing and never match."""
    return re.sub(r"[^\d.–]", "", value)


def check_figures(texts, rows):
    problems = []
    quantities = {}
    for r in rows:
        quantities.setdefault(r["quantity"], []).append(r)
        owner = texts.get(r["owner"])
        if owner is None:
            problems.append(f"ci/figures.tsv: {r['quantity']}: owner {r['owner']} does not exist")
        elif r["value"] not in owner:
            problems.append(
                f"{r['owner']}: figures: owns {r['quantity']} = {r['value']} "
                f"({r['setup']}) but no longer states it"
            )
    for quantity, recorded in quantities.items():
        allowed = {normal(r["value"]) for r in recorded}
        listed = "; ".join(f"{r['value']} ({r['setup']}; {r['owner']})" for r in recorded)
        first = recorded[0]
        for page, text in texts.items():
            if not fnmatch.fnmatch(page, first["pages"]):
                continue
            for number, block in blocks(text.splitlines()):
                if not first["context_re"].search(block):
                    continue
                for m in first["capture_re"].finditer(block):
                    for quoted in filter(None, m.groups()):
                        if normal(quoted) not in allowed or not normal(quoted):
                            problems.append(
                                f"{page}:{number}: figures: {quantity} quoted as "
                                f"'{quoted}'; ci/figures.tsv records {listed}"
                            )
    return problems


def main():
    docs = pages()
    if len(docs) < 2 or not FIGURES.is_file():
        print(f"docs-figures: no README.md, docs/*.md or {name(FIGURES)} under {ROOT}", file=sys.stderr)
        return 2
    texts = {name(p): p.read_text(encoding="utf-8") for p in docs}
    rows = load_figures()
    problems = []
    for page in docs:
        lines = texts[name(page)].splitlines()
        problems += check_paths(page, lines) + check_stamp(page, lines)
    problems += check_figures(texts, rows)
    for p in problems:
        print(p)
    print(
        f"docs-figures: {len(docs)} pages, {len(rows)} key figures in "
        f"{len({r['quantity'] for r in rows})} quantities, {len(problems)} problem(s)"
    )
    if problems:
        print("docs-figures: FAIL: keep paths inside the repository, stamp each first "
              "table, and quote a key figure as its owner states it (or link to it)", file=sys.stderr)
        return 1
    print("docs-figures: PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
