"""The repository explains itself: nothing cites a document or an issue tracker a reader does not have,
and every relative link in the Markdown docs leads somewhere.

* No ``.proto``, ``.py`` or ``.md`` file (tracked, or new and not ignored; ``.venv`` and ``.cache``
  excluded) names one of the project's internal planning documents or refers to an issue by number.
  What those said belongs in ``docs/`` (vocabulary, lifecycle and invariants in docs/concepts.md,
  ceilings and targets in docs/performance.md); proto comments restate the rule itself.
* Every relative Markdown link (inline ``[text](target)`` or reference ``[label]: target``) in
  README.md, docs/ and the other READMEs resolves to an existing file or folder, and a ``#fragment``
  into a Markdown file names one of its headings (GitHub's heading anchors).
* Every ``docs/<name>.md`` a Python module under libs/ or services/ cites (docstrings, comments)
  exists, and a ``#fragment`` after it names one of its headings.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXCLUDED_DIRS = {".venv", ".cache", ".git", "node_modules", "__pycache__"}
SCANNED_SUFFIXES = {".proto", ".py", ".md"}

# Built from parts so that this file does not trip its own check.
_INTERNAL_DOCS = ("DESIGN", "PERFORMANCE", "STACK", "CONVENTIONS")
FORBIDDEN = [
    (re.compile(r"\b(?:" + "|".join(_INTERNAL_DOCS) + r")\.md\b"), "an internal document"),
    (re.compile(r"\b" + "iss" + r"ue\s+#?\d+", re.IGNORECASE), "an issue number"),
]


def _repo_files() -> list[Path]:
    """Files git tracks plus new files it does not ignore; a plain walk when git is unavailable."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=ROOT,
            check=True,
            capture_output=True,
        ).stdout
        names = [n for n in out.decode().split("\0") if n]
    except (OSError, subprocess.CalledProcessError):
        names = []
        for dirpath, dirnames, filenames in os.walk(ROOT):
            dirnames[:] = [d for d in dirnames if d not in EXCLUDED_DIRS]
            names += [os.path.relpath(os.path.join(dirpath, f), ROOT) for f in filenames]
    files = []
    for name in sorted(set(names)):
        parts = Path(name).parts
        if any(p in EXCLUDED_DIRS for p in parts):
            continue
        path = ROOT / name
        if path.is_file():
            files.append(path)
    return files


FILES = _repo_files()
SCANNED = [p for p in FILES if p.suffix in SCANNED_SUFFIXES]
MARKDOWN_WITH_LINKS = [
    p
    for p in FILES
    if p.suffix == ".md"
    and (p.parent == ROOT or p.relative_to(ROOT).parts[0] == "docs" or p.name == "README.md")
]


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def test_the_scan_sees_the_tree():
    assert any(_rel(p) == "README.md" for p in SCANNED)
    assert any(p.suffix == ".proto" for p in SCANNED)
    assert any(_rel(p).startswith("docs/") for p in MARKDOWN_WITH_LINKS)


def test_nothing_cites_internal_documents_or_issue_numbers():
    found = []
    for path in SCANNED:
        text = path.read_text(encoding="utf-8", errors="replace")
        for lineno, line in enumerate(text.splitlines(), 1):
            for pattern, what in FORBIDDEN:
                for m in pattern.finditer(line):
                    found.append(f"{_rel(path)}:{lineno}: {what}: {m.group(0)!r}")
    assert not found, (
        "cite docs/ instead (docs/concepts.md, docs/performance.md, ...), or restate the rule:\n"
        + "\n".join(found)
    )


# -- Markdown links -----------------------------------------------------------------------------

_FENCE = re.compile(r"^(\s*)(`{3,}|~{3,}).*?^\1\2[ \t]*$", re.MULTILINE | re.DOTALL)
_CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1", re.DOTALL)
_INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_REF_LINK = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$", re.MULTILINE)
_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)
_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def _strip_code(text: str) -> str:
    text = _FENCE.sub("", text)
    return _CODE_SPAN.sub("", text)


def _links(text: str) -> list[str]:
    text = _strip_code(text)
    return _INLINE_LINK.findall(text) + _REF_LINK.findall(text)


def _anchors(markdown: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens, repeats numbered."""
    seen: dict[str, int] = {}
    out = set()
    for heading in _HEADING.findall(_FENCE.sub("", markdown)):
        heading = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading: its text
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


@pytest.mark.parametrize("doc", MARKDOWN_WITH_LINKS, ids=_rel)
def test_relative_markdown_links_resolve(doc: Path):
    broken = []
    for target in _links(doc.read_text(encoding="utf-8")):
        if _SCHEME.match(target) or target.startswith("//"):
            continue  # a URL: not ours to check offline
        path_part, _, fragment = target.partition("#")
        dest = doc if not path_part else (doc.parent / path_part).resolve()
        if not dest.exists():
            broken.append(f"{target}: no such file")
            continue
        if fragment and dest.is_file() and dest.suffix == ".md":
            if fragment.lower() not in _anchors(dest.read_text(encoding="utf-8")):
                broken.append(f"{target}: no heading with anchor #{fragment}")
    assert not broken, f"{_rel(doc)}:\n" + "\n".join(broken)


# -- docs/ paths cited by the code --------------------------------------------------------------

_DOCS_CITATION = re.compile(r"(?<![\w/.-])(docs/[\w./-]+?\.md)(?:#([\w-]+))?")
CODE = [p for p in FILES if p.suffix == ".py" and p.relative_to(ROOT).parts[0] in ("libs", "services")]


def test_the_code_scan_sees_the_libraries_and_the_services():
    tops = {p.relative_to(ROOT).parts[:2] for p in CODE}
    assert ("libs", "common") in tops and ("services", "dispatcher") in tops


def _broken_citations(text: str) -> list[str]:
    broken = []
    for lineno, line in enumerate(text.splitlines(), 1):
        for m in _DOCS_CITATION.finditer(line):
            doc, fragment = ROOT / m.group(1), m.group(2)
            if not doc.is_file():
                broken.append(f"{lineno}: {m.group(1)}: no such file")
            elif fragment and fragment.lower() not in _anchors(doc.read_text(encoding="utf-8")):
                broken.append(f"{lineno}: {m.group(0)}: no heading with anchor #{fragment}")
    return broken


def test_the_citation_check_catches_a_missing_doc_or_heading():
    assert _broken_citations("see docs/concepts.md and docs/adr/0004-layout.md") == []
    assert _broken_citations("(``queue_state.state``; docs/queues.md)") == ["1: docs/queues.md: no such file"]
    assert _broken_citations("x\n# docs/schedules.md#nope") == [
        "2: docs/schedules.md#nope: no heading with anchor #nope"
    ]


def test_docs_cited_by_the_code_exist():
    broken = [
        f"{_rel(module)}:{entry}"
        for module in CODE
        for entry in _broken_citations(module.read_text(encoding="utf-8"))
    ]
    assert not broken, "cite an existing page of docs/:\n" + "\n".join(broken)
