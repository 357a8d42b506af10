"""Every citation in the repository resolves inside the repository.

Rules, each a test below:

(a) An id cited in a scanned file is defined where its letter says: ``R<n>``/``R<n>.<m>``
    (rules of the reference) and ``B<n>`` (its weak points) in ``spec/REFERENCE.md``; ``D<n>``
    (decided deviations), ``N<n>`` (differences found in the model) and ``I<n>`` (pipeline
    differences) in ``spec/DEVIATIONS.md``. No file defines ``P<n>``, so any ``P<n>`` fails.
(b) Each id is defined exactly once, in the file that owns its letter. A definition is a
    heading whose first word is the id, or a table row whose first cell is the id.
(c) No scanned file names a path outside the repository (the old location of the reference's
    description, or the name of that file).
(d) Every relative Markdown link (inline, or a reference-style ``[id]: target`` line) in
    README.md, spec/, docs/ and proofs/ points to a file inside the repository, and its
    ``#anchor``, if any, to a heading (GitHub's slug) or an ``<a id>`` of that Markdown file.

What counts as a citation: an upper-case letter of ``RBDNIP``, digits, and for R further
``.digits``, standing alone: not after a letter, digit, ``_`` or ``.`` (so ``0xB2``, ``_I1``,
``test_b6`` and ``x.D1`` are not citations) and not followed by a letter, digit, ``_``, ``(``
or ``.`` plus a letter (so ``I1x``, ``P0(`` and ``P0.samples`` are not). The checker takes the
repository root as an argument; the last tests run it on small fake repositories with planted
faults to show each rule can fail.
"""

from __future__ import annotations

import collections
import dataclasses
import re
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

SCANNED = (
    "README.md",
    "spec/*.md",
    "docs/*.md",
    "proofs/*.md",
    "proofs/*.py",
    "src/**/*.py",
    "tests/**/*.py",
    "benchmarks/*.py",
)
LINKED = ("README.md", "spec/*.md", "docs/*.md", "proofs/*.md")

# The file that defines each letter's ids. P has none: the P-numbers of earlier working notes
# were rewritten into what they said, so a P citation can never resolve.
OWNER = {
    "R": "spec/REFERENCE.md",
    "B": "spec/REFERENCE.md",
    "D": "spec/DEVIATIONS.md",
    "N": "spec/DEVIATIONS.md",
    "I": "spec/DEVIATIONS.md",
}


CITATION = re.compile(r"(?<![\w.])([RBDNIP])(\d+(?:\.\d+)*)(?![\w(]|\.\d|\.[A-Za-z_])")
# Character classes keep this file from matching its own patterns.
OUTSIDE_PATH = re.compile(r"/wor[k]/|\.\./share[d]\b|shared/referenc[e]\b|\bBEHAVIO[R]\b")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
TABLE_ROW = re.compile(r"^\|\s*([^|]*?)\s*\|")
FENCE = re.compile(r"^\s*(```|~~~)")
LINK = re.compile(r"\[([^\[\]\n]*)\]\(([^)\s]+)\)")
LINK_DEFINITION = re.compile(r"^ {0,3}\[[^\]]+\]:\s*(\S+)")
HTML_ANCHOR = re.compile(r"<a\s+(?:id|name)=\"([^\"]+)\"")
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


@dataclasses.dataclass(frozen=True)
class Finding:
    """One problem: where it is and what is wrong."""

    path: str
    line: int
    problem: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.problem}"


# ---------------------------------------------------------------- the checker


def files(root: Path, patterns: Iterable[str]) -> list[Path]:
    """The files under ``root`` matching any of ``patterns``, sorted, each once."""
    return sorted({p for pattern in patterns for p in root.glob(pattern) if p.is_file()})


def rel(root: Path, path: Path) -> str:
    return path.relative_to(root).as_posix()


def citations(text: str) -> Iterator[tuple[int, str]]:
    """``(line number, id)`` for every citation in ``text``."""
    for number, line in enumerate(text.splitlines(), 1):
        for match in CITATION.finditer(line):
            yield number, match.group(1) + match.group(2)


def outside_lines(lines: list[str]) -> Iterator[tuple[int, str]]:
    """``(line number, line)`` of the lines that are not inside a fenced code block."""
    fenced = False
    for number, line in enumerate(lines, 1):
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            yield number, line


def definitions(root: Path, owner: str) -> list[tuple[int, str]]:
    """``(line number, id)`` of every id ``owner`` defines, in file order, repeats kept."""
    path = root / owner
    if not path.is_file():
        return []
    letters = {letter for letter, file in OWNER.items() if file == owner}
    found = []
    for number, line in outside_lines(path.read_text().splitlines()):
        heading, row = HEADING.match(line), TABLE_ROW.match(line)
        first = heading.group(2).split(" ", 1)[0] if heading else row.group(1) if row else ""
        match = CITATION.fullmatch(first)
        if match and match.group(1) in letters:
            found.append((number, first))
    return found


def defined_ids(root: Path) -> set[str]:
    return {ident for owner in set(OWNER.values()) for _, ident in definitions(root, owner)}


def check_citations(root: Path) -> list[Finding]:
    """Rule (a): every cited id is defined by the file that owns its letter."""
    defined = defined_ids(root)
    findings = []
    for path in files(root, SCANNED):
        for number, ident in citations(path.read_text()):
            if ident not in defined:
                owner = OWNER.get(ident[0])
                problem = f"{ident} is not defined in {owner}" if owner else f"{ident}: no file defines P-ids"
                findings.append(Finding(rel(root, path), number, problem))
    return findings


def check_definitions(root: Path) -> list[Finding]:
    """Rule (b): every owning file exists and defines each of its ids once."""
    findings = []
    for owner in sorted(set(OWNER.values())):
        if not (root / owner).is_file():
            findings.append(Finding(owner, 0, "missing"))
        seen: dict[str, int] = {}
        for number, ident in definitions(root, owner):
            if ident in seen:
                problem = f"{ident} defined again (first on line {seen[ident]})"
                findings.append(Finding(owner, number, problem))
            seen.setdefault(ident, number)
    return findings


def outside_path_findings(root: Path) -> list[Finding]:
    """Rule (c): every line naming a path outside the repository."""
    findings = []
    for path in files(root, SCANNED):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            for match in OUTSIDE_PATH.finditer(line):
                problem = f"path outside the repository: {match[0]!r}"
                findings.append(Finding(rel(root, path), number, problem))
    return findings


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: link text kept, lower case, punctuation dropped, spaces to -."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """The anchors of a Markdown file: heading slugs (repeats numbered as GitHub does), ``<a id>``s."""
    found: set[str] = set()
    counts: collections.Counter[str] = collections.Counter()
    for _, line in outside_lines(path.read_text().splitlines()):
        found.update(HTML_ANCHOR.findall(line))
        heading = HEADING.match(line)
        if heading:
            base = slug(heading.group(2))
            found.add(f"{base}-{counts[base]}" if counts[base] else base)
            counts[base] += 1
    return found


def link_problem(root: Path, source: Path, target: str) -> str | None:
    """Why the link ``target`` in ``source`` does not resolve, or None."""
    file_part, _, anchor = target.partition("#")
    path = (source.parent / file_part).resolve() if file_part else source
    if not path.is_relative_to(root.resolve()):
        return f"link {target!r} leaves the repository"
    if not path.exists():
        return f"link {target!r}: no file {file_part}"
    if anchor and path.suffix == ".md" and anchor not in anchors(path):
        return f"link {target!r}: {path.name} has no heading or anchor {anchor!r}"
    return None


def check_links(root: Path) -> list[Finding]:
    """Rule (d): relative Markdown links resolve to files (and anchors) inside the repository."""
    findings = []
    for source in files(root, LINKED):
        for number, line in outside_lines(source.read_text().splitlines()):
            targets = [target for _, target in LINK.findall(line)] + LINK_DEFINITION.findall(line)
            for target in targets:
                if SCHEME.match(target):
                    continue
                problem = link_problem(root, source, target)
                if problem:
                    findings.append(Finding(rel(root, source), number, problem))
    return findings


def report(findings: list[Finding]) -> str:
    return "\n".join(map(str, findings))


# ---------------------------------------------------------------- the repository


def test_every_cited_id_is_defined() -> None:
    assert len(list(citations((ROOT / "spec" / "DEVIATIONS.md").read_text()))) > 50
    findings = check_citations(ROOT)
    assert not findings, report(findings)


def test_every_id_is_defined_once() -> None:
    defined = defined_ids(ROOT)
    for letter, least in {"R": 40, "B": 22, "D": 22, "N": 8, "I": 9}.items():
        assert sum(ident.startswith(letter) for ident in defined) >= least, letter
    findings = check_definitions(ROOT)
    assert not findings, report(findings)


def test_no_path_outside_the_repository() -> None:
    findings = outside_path_findings(ROOT)
    assert not findings, report(findings)


def test_relative_links_resolve() -> None:
    linked = files(ROOT, LINKED)
    assert sum(len(LINK.findall(p.read_text())) for p in linked) > 200
    findings = check_links(ROOT)
    assert not findings, report(findings)


# ---------------------------------------------------------------- the checker can fail


def cite(letter: str, number: str) -> str:
    """An id written so that this file does not itself cite it."""
    return letter + number


FAKE_REFERENCE = """# Reference

## R4 — rows

### R4.7 — offsets

| Id | Finding |
|---|---|
| B1 | progress overstated |
"""
FAKE_DEVIATIONS = "# Deviations\n\n### D1 — honest progress\n\n### N1 — types\n\n### I1 — units\n"
CLEAN_DOC = """# Clean

R4.7 and R4, B1/D1, N1 and I1; B1..B1. Not citations: 0xB2, deadB2, `_I1`, test_b6, I1x,
`P0.samples`, P0(x), x.D1. Links: [ref](../spec/REFERENCE.md#r47--offsets),
[top](#clean), [web](https://example.com/x), [D1] and [I1].

[D1]: ../spec/DEVIATIONS.md#d1--honest-progress
[I1]: ../spec/DEVIATIONS.md#i1--units

```
[not a link](nowhere.md)
```
"""


def fake_repo(root: Path, extra: str = "", reference: str = FAKE_REFERENCE) -> Path:
    (root / "spec").mkdir()
    (root / "docs").mkdir()
    (root / "tests").mkdir()
    (root / "spec" / "REFERENCE.md").write_text(reference)
    (root / "spec" / "DEVIATIONS.md").write_text(FAKE_DEVIATIONS)
    (root / "docs" / "CLEAN.md").write_text(CLEAN_DOC)
    (root / "docs" / "PLANTED.md").write_text(f"# Planted\n\nfine\n{extra}\n")
    (root / "tests" / "test_fake.py").write_text('"""Cites R4.7 and D1."""\n')
    return root


def all_findings(root: Path) -> list[Finding]:
    return check_citations(root) + check_definitions(root) + outside_path_findings(root) + check_links(root)


def test_checker_accepts_a_clean_fake_repository(tmp_path: Path) -> None:
    assert all_findings(fake_repo(tmp_path)) == []


PLANTED = {
    "unknown rule": (cite("R", "4.8"), f"{cite('R', '4.8')} is not defined in spec/REFERENCE.md"),
    "unknown section": (cite("R", "5"), f"{cite('R', '5')} is not defined in spec/REFERENCE.md"),
    "unknown weak point": (f"({cite('B', '23')})", f"{cite('B', '23')} is not defined in spec/REFERENCE.md"),
    "unknown deviation": (f"B1/{cite('D', '2')}", f"{cite('D', '2')} is not defined in spec/DEVIATIONS.md"),
    "a retired P-id": (f"noted as {cite('P', '3')}", f"{cite('P', '3')}: no file defines P-ids"),
    "an absolute outside path": ("/" + "work/shared/x.md", "path outside the repository"),
    "a relative outside path": ("../" + "shared/x.md", "path outside the repository"),
    "the old notes file": ("BEHAV" + "IOR.md section 11", "path outside the repository"),
    "a missing file": ("[x](MISSING.md)", "no file MISSING.md"),
    "a missing anchor": ("[x](../spec/REFERENCE.md#r48)", "has no heading or anchor 'r48'"),
    "a link out of the repository": ("[x](../../elsewhere.md)", "leaves the repository"),
    "a reference-style link": ("[D1]: ../spec/DEVIATIONS.md#d2", "has no heading or anchor 'd2'"),
}


@pytest.mark.parametrize("case", PLANTED)
def test_checker_finds_a_planted_fault(tmp_path: Path, case: str) -> None:
    text, expected = PLANTED[case]
    findings = all_findings(fake_repo(tmp_path, extra=text))
    assert len(findings) == 1, report(findings)
    assert findings[0].path == "docs/PLANTED.md" and findings[0].line == 4
    assert expected in findings[0].problem


def test_checker_finds_a_bad_citation_in_python(tmp_path: Path) -> None:
    root = fake_repo(tmp_path)
    (root / "tests" / "test_fake.py").write_text(f'"""Cites {cite("I", "2")}."""\n')
    assert [str(f) for f in all_findings(root)] == [
        f"tests/test_fake.py:1: {cite('I', '2')} is not defined in spec/DEVIATIONS.md"
    ]


def test_checker_finds_a_duplicate_definition(tmp_path: Path) -> None:
    root = fake_repo(tmp_path, reference=FAKE_REFERENCE + "\n### R4.7 — again\n")
    assert [str(f) for f in all_findings(root)] == [
        "spec/REFERENCE.md:11: R4.7 defined again (first on line 5)"
    ]


def test_checker_finds_a_missing_reference_file(tmp_path: Path) -> None:
    root = fake_repo(tmp_path)
    (root / "spec" / "REFERENCE.md").unlink()
    problems = {str(f) for f in all_findings(root)}
    assert "spec/REFERENCE.md:0: missing" in problems
    assert "docs/CLEAN.md:3: R4.7 is not defined in spec/REFERENCE.md" in problems
