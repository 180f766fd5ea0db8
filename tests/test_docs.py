"""The user documentation holds together: its relative links resolve, and nothing points outside the project."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])

# [text](target) and [text]: target; images too. Targets with a scheme are not files.
_INLINE = re.compile(r"\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_REFERENCE = re.compile(r"^\s*\[[^\]]+\]:\s*(\S+)", re.M)
_EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.I)  # http:, https:, mailto:, ...
_FENCE = re.compile(r"^```.*?^```", re.M | re.S)

FORBIDDEN = ("DESIGN.md", "../shared")


def _links(path: Path) -> list[str]:
    text = _FENCE.sub("", path.read_text(encoding="utf-8"))  # code blocks hold no links
    return [*_INLINE.findall(text), *_REFERENCE.findall(text)]


def _anchors(path: Path) -> set[str]:
    """GitHub's heading anchors: lowercase, punctuation dropped, spaces to dashes."""
    text = _FENCE.sub("", path.read_text(encoding="utf-8"))
    anchors = set()
    for heading in re.findall(r"^#{1,6}\s+(.+?)\s*#*\s*$", text, re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
        anchors.add(slug.replace(" ", "-"))
    return anchors


def _project_files() -> list[Path]:
    files = [*DOCS]
    for folder in ("simcluster", "examples"):
        files += [p for p in (ROOT / folder).rglob("*")
                  if p.is_file() and not p.is_symlink() and p.suffix in (".py", ".md", ".out", ".txt")
                  and "__pycache__" not in p.parts]
    return sorted(files)


def test_docs_folder_exists_with_pages() -> None:
    assert (ROOT / "docs").is_dir()
    assert len(DOCS) > 1


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_points_at_a_file_in_the_project(path: Path) -> None:
    broken = []
    for link in _links(path):
        if _EXTERNAL.match(link):
            continue
        target, _, anchor = link.partition("#")
        resolved = (path.parent / target).resolve() if target else path
        if not resolved.exists():
            broken.append(f"{link} (no such file)")
        elif ROOT not in resolved.parents and resolved != ROOT:
            broken.append(f"{link} (outside the project)")
        elif anchor and resolved.suffix == ".md" and anchor not in _anchors(resolved):
            broken.append(f"{link} (no heading #{anchor} in {resolved.name})")
    assert not broken, f"{path.relative_to(ROOT)}: broken links: {', '.join(broken)}"


def test_no_project_file_refers_to_files_outside_the_project() -> None:
    offenders = []
    for path in _project_files():
        text = path.read_text(encoding="utf-8", errors="replace")
        for word in FORBIDDEN:
            for number, line in enumerate(text.splitlines(), 1):
                if word in line:
                    offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not offenders, "mentions of files outside the project:\n" + "\n".join(offenders)
