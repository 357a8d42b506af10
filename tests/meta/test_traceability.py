"""Traceability between ``spec/*.md``, the executable spec and the tests.

Fails when:

(a) the invariant table of ``spec/INVARIANTS.md`` and ``INVARIANT_NAMES`` differ;
(b) an invariant has no predicate of exactly its name in
    ``elastic_loader.spec.invariants``;
(c) an invariant has no test function under ``tests/`` whose name contains it
    (found with ``ast``), or the table's *Tests* column names a missing test;
(d) a link from ``spec/*.md`` into ``src/`` names a missing file or symbol;
(e) an error code the model can raise is missing from ``spec/ERRORS.md``, or
    the document lists a code the model cannot raise.

The proof side (``proofs/``) is checked by its own test.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from elastic_loader import spec
from elastic_loader.spec import invariants
from elastic_loader.spec.errors import SpecError

ROOT = Path(__file__).resolve().parents[2]
SPEC_DOCS = ROOT / "spec"
TESTS = ROOT / "tests"
SRC = ROOT / "src"
MODEL = SRC / "elastic_loader" / "spec"

TABLE_HEADER = ["Name", "Kind", "Statement", "Model predicate", "Tests", "Proof"]
LINK = re.compile(r"\[([^\[\]\n]+)\]\(([^)\s]+)\)")
NAME_LINK_TEXT = re.compile(r"^`([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)?)`$")
BACKTICKED = re.compile(r"`([^`]+)`")
ERROR_ROW = re.compile(r"^\|\s*`([a-z0-9_]+)`\s*\|\s*(ValueError|TypeError|RuntimeError)\s*\|", re.MULTILINE)
ERROR_CLASSES = ("SpecValueError", "SpecTypeError", "SpecRuntimeError")


# ---------------------------------------------------------------- parsing the documents


def invariant_table() -> list[dict[str, str]]:
    """The rows of the first table of INVARIANTS.md whose header starts with ``Name``."""
    lines = (SPEC_DOCS / "INVARIANTS.md").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| Name |"))
    header = [c.strip() for c in lines[start].strip("|").split("|")]
    assert header == TABLE_HEADER, f"unexpected INVARIANTS.md table header {header}"
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        assert len(cells) == len(header), f"malformed table row: {line}"
        rows.append(dict(zip(header, cells)))
    return rows


def table_names() -> list[str]:
    return [row["Name"].strip("`") for row in invariant_table()]


@functools.cache
def _test_function_names() -> frozenset[str]:
    """Every function named ``test*`` defined in a Python file under ``tests/``."""
    names: set[str] = set()
    for path in TESTS.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
                names.add(node.name)
    return frozenset(names)


# ---------------------------------------------------------------- (a) (b) (c) invariants


def test_table_matches_invariant_names() -> None:
    names = table_names()
    assert len(names) == len(set(names)), f"duplicate rows in the INVARIANTS.md table: {names}"
    assert set(names) == set(invariants.INVARIANT_NAMES), (
        f"only in the table: {sorted(set(names) - set(invariants.INVARIANT_NAMES))}; "
        f"only in INVARIANT_NAMES: {sorted(set(invariants.INVARIANT_NAMES) - set(names))}"
    )


def test_table_rows_are_consistent() -> None:
    """Kind follows the suffix; the predicate link names the invariant; one section per name."""
    text = (SPEC_DOCS / "INVARIANTS.md").read_text()
    for row in invariant_table():
        name = row["Name"].strip("`")
        kind = "Inv" if name.endswith("Inv") else "Prop" if name.endswith("Prop") else None
        assert row["Kind"] == kind, f"{name}: kind {row['Kind']!r}, expected {kind!r}"
        # The predicate may be defined in a sibling module that invariants.py re-exports (invariants_local,
        # invariants_packing, invariants_saved, ...); the link must name the defining file.
        defining = Path(inspect.getfile(getattr(invariants, name))).name
        link = f"[`{name}`](../src/elastic_loader/spec/{defining})"
        assert link in row["Model predicate"], f"{name}: the predicate link must be {link}"
        assert f"(../proofs/{name}.md)" in row["Proof"], f"{name}: proof link must be proofs/{name}.md"
        headings = re.findall(rf"^### {name}$", text, re.MULTILINE)
        assert len(headings) == 1, f"{name}: expected one '### {name}' section, found {len(headings)}"


@pytest.mark.parametrize("name", invariants.INVARIANT_NAMES)
def test_every_invariant_has_a_predicate(name: str) -> None:
    predicate = getattr(invariants, name, None)
    assert inspect.isfunction(predicate), f"elastic_loader.spec.invariants has no function {name}"
    assert predicate.__name__ == name


def test_every_invariant_has_a_test() -> None:
    tests = _test_function_names()
    missing = [name for name in table_names() if not any(name in test for test in tests)]
    assert not missing, f"invariants without a test function naming them under tests/: {missing}"


def test_listed_tests_exist_and_name_their_invariant() -> None:
    tests = _test_function_names()
    problems = []
    for row in invariant_table():
        name = row["Name"].strip("`")
        listed = BACKTICKED.findall(row["Tests"])
        assert listed, f"{name}: the Tests column lists no test"
        problems += [f"{name}: {t} does not exist" for t in listed if t not in tests]
        problems += [f"{name}: {t} does not contain the name" for t in listed if name not in t]
    assert not problems, "\n".join(problems)


def test_the_test_search_sees_a_missing_name() -> None:
    """The ``ast`` search is not vacuous: a made-up invariant name has no test."""
    tests = _test_function_names()
    assert any("PartitionInv" in t for t in tests)
    assert not any("NoSuchInv" in t for t in tests)


# ---------------------------------------------------------------- (d) links into src/


@functools.cache
def defined_names(path: Path) -> dict[str, set[str]]:
    """Module-level names of ``path`` -> the names defined in their body (classes only)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found: dict[str, set[str]] = {}

    def targets(node: ast.stmt) -> Iterator[str]:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            yield node.name
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                for sub in ast.walk(target):
                    if isinstance(sub, ast.Name):
                        yield sub.id
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)) and isinstance(node.target, ast.Name):
            yield node.target.id

    for node in tree.body:
        for name in targets(node):
            members = set()
            if isinstance(node, ast.ClassDef):
                members = {member for stmt in node.body for member in targets(stmt)}
            found.setdefault(name, set()).update(members)
    return found


def src_links() -> list[tuple[str, str, str]]:
    """``(document, link text, target)`` for every link from ``spec/*.md`` into ``src/``."""
    links = []
    for doc in sorted(SPEC_DOCS.glob("*.md")):
        for text, target in LINK.findall(doc.read_text()):
            path = (SPEC_DOCS / target.split("#")[0]).resolve()
            if path.is_relative_to(SRC) or target.startswith("../src/"):
                links.append((doc.name, text, target))
    return links


def link_problem(text: str, target: str) -> str | None:
    """Why a link into ``src/`` is broken, or None."""
    if "#" in target:
        return "links into src/ carry no anchor"
    path = (SPEC_DOCS / target).resolve()
    if not path.is_file():
        return f"no file {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}"
    match = NAME_LINK_TEXT.match(text)
    if match is None or text.endswith(".py`"):
        return None
    names = defined_names(path)
    head, _, member = match.group(1).partition(".")
    if head not in names:
        return f"{path.name} defines no {head}"
    if member and member not in names[head]:
        return f"{head} in {path.name} defines no {member}"
    return None


def test_links_into_src_resolve() -> None:
    links = src_links()
    assert len(links) > 100, "the spec documents should reference the model"
    problems = [
        f"{doc}: [{text}]({target}): {why}"
        for doc, text, target in links
        if (why := link_problem(text, target))
    ]
    assert not problems, "\n".join(problems)


def test_every_model_link_names_a_symbol_or_file() -> None:
    """A link into src/ whose text is neither a backticked name nor a file is ambiguous."""
    bad = [
        f"{doc}: [{text}]({target})"
        for doc, text, target in src_links()
        if not NAME_LINK_TEXT.match(text) and not re.match(r"^`[^`]*(\.py|/)`$", text)
    ]
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize(
    ("text", "target"),
    [
        ("`iterate_rowz`", "../src/elastic_loader/spec/rows.py"),
        ("`RowRun.state_before`", "../src/elastic_loader/spec/rows.py"),
        ("`iterate_rows`", "../src/elastic_loader/spec/nope.py"),
        ("`iterate_rows`", "../src/elastic_loader/spec/rows.py#L3"),
    ],
)
def test_link_checker_detects_broken_links(text: str, target: str) -> None:
    assert link_problem(text, target) is not None


@pytest.mark.parametrize(
    ("text", "target"),
    [
        ("`iterate_rows`", "../src/elastic_loader/spec/rows.py"),
        ("`Prefixes.state_after`", "../src/elastic_loader/spec/rows.py"),
        ("`PackedState.emitted`", "../src/elastic_loader/spec/packing.py"),
        ("`EPOCH_PRIME`", "../src/elastic_loader/spec/params.py"),
    ],
)
def test_link_checker_accepts_good_links(text: str, target: str) -> None:
    assert link_problem(text, target) is None


# ---------------------------------------------------------------- (e) error codes


@dataclasses.dataclass(frozen=True)
class ModelCodes:
    literals: frozenset[str]
    """Codes written as string literals."""
    templates: frozenset[str]
    """Codes built with an f-string, as regexes (``{name}_type`` -> ``[a-z0-9_]+_type``)."""


@functools.cache
def model_codes() -> ModelCodes:
    """The code argument of every ``require`` and ``Spec*Error`` call in the model, read with ``ast``."""
    literals: set[str] = set()
    templates: set[str] = set()
    for path in MODEL.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
                continue
            if node.func.id == "require" and len(node.args) >= 2:
                arg = node.args[1]
            elif node.func.id in ERROR_CLASSES and node.args:
                arg = node.args[0]
            else:
                continue
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                literals.add(arg.value)
            elif isinstance(arg, ast.JoinedStr):
                parts = [
                    re.escape(str(v.value)) if isinstance(v, ast.Constant) else "[a-z0-9_]+"
                    for v in arg.values
                ]
                templates.add("".join(parts))
            else:
                # Only ``require`` itself forwards its parameter; anything else must be a code.
                assert isinstance(arg, ast.Name) and path.name == "errors.py", (
                    f"{path.name}:{node.lineno}: code {ast.unparse(arg)} is neither a literal nor an f-string"
                )
    return ModelCodes(frozenset(literals), frozenset(templates))


def documented_codes() -> dict[str, str]:
    rows = ERROR_ROW.findall((SPEC_DOCS / "ERRORS.md").read_text())
    codes = [code for code, _ in rows]
    assert len(codes) == len(set(codes)), "a code is listed twice in spec/ERRORS.md"
    return dict(rows)


def test_literal_codes_are_documented() -> None:
    missing = sorted(model_codes().literals - set(documented_codes()))
    assert not missing, f"codes the model raises that spec/ERRORS.md does not list: {missing}"


def test_documented_codes_occur_in_the_model() -> None:
    codes = model_codes()
    unknown = [
        code
        for code in documented_codes()
        if code not in codes.literals and not any(re.fullmatch(t, code) for t in codes.templates)
    ]
    assert not unknown, f"codes in spec/ERRORS.md the model cannot raise: {unknown}"


def test_every_code_template_is_documented() -> None:
    docs = documented_codes()
    bare = [t for t in model_codes().templates if not any(re.fullmatch(t, code) for code in docs)]
    assert not bare, f"f-string codes with no documented instance: {bare}"


def _raised(call: object) -> str | None:
    assert callable(call)
    try:
        call()
    except SpecError as exc:
        return exc.code
    return None


def test_templated_codes_found_by_sweeping_are_documented() -> None:
    """Codes built from a parameter or key name: drive every name with bad values.

    A new constructor keyword or checkpoint key gets its codes from the model's
    own tables; this sweep raises them and requires each to be documented.
    """
    table = spec.TableFacts({"tokens": "int_list", "text": "other_list", "label": "scalar"}, rows=100)
    packing = {"pack_sequences": 4, "eos_id": 0, "pad_id": 1, "blocks_per_epoch": 4, "columns": ["tokens"]}
    seen: set[str] = set()
    for field in dataclasses.fields(spec.Params):
        for value in (object(), -1, 0, "x", True, [], 2**64, -(2**64)):
            for base in ({}, packing):
                kwargs = dict(base, **{field.name: value})
                seen.add(
                    _raised(lambda kwargs=kwargs: spec.validate_params(spec.Params(**kwargs), table)) or ""
                )
    config = spec.RunConfig(2, 0, 0, "ab", spec.PackingConfig(4, 9, 0, 4))
    row_config = dataclasses.replace(config, packing=None)
    snapshots = [
        (row_config, spec.snapshot_row(row_config, spec.initial_row_state(2))),
        (config, spec.snapshot_packed(config, spec.initial_packed_state(2))),
    ]
    for cfg, snap in snapshots:
        for key in snap:
            for value in (7, -1, True, "x", None, [], 2.0):
                bad = dict(snap, **{key: value})
                if cfg.packing is None:
                    seen.add(_raised(lambda bad=bad, cfg=cfg: spec.load_row(cfg, bad, 5)) or "")
                else:
                    seen.add(_raised(lambda bad=bad, cfg=cfg: spec.load_packed(cfg, bad, 5)) or "")
                seen.add(_raised(lambda bad=bad, snap=snap: spec.merge_state_dicts([snap, bad])) or "")
    seen.discard("")
    templates = model_codes().templates
    templated = {code for code in seen if any(re.fullmatch(t, code) for t in templates)}
    assert len(templated) > 25, f"the sweep should reach the templated codes, reached {sorted(templated)}"
    missing = sorted(seen - set(documented_codes()))
    assert not missing, f"codes raised by the model but not listed in spec/ERRORS.md: {missing}"


def test_the_readmes_count_the_invariants() -> None:
    """README.md and spec/README.md say how many invariants there are; the number follows the table."""
    count = len(invariants.INVARIANT_NAMES)
    assert f"states {count} named invariants" in (ROOT / "README.md").read_text()
    assert f"The {count} named guarantees" in (SPEC_DOCS / "README.md").read_text()
