"""The vector files: generate, check and read them (the ``python -m`` command lives here).

Usage::

    python -m elastic_loader.testing.vectors generate [--out spec/vectors]
    python -m elastic_loader.testing.vectors check [--dir spec/vectors]

``generate`` writes one ``<family>.json`` per family of
:mod:`elastic_loader.testing.vectors.families`; the text is canonical (fixed key
order, sets sorted, no timestamps), so regenerating is byte-identical.
``check`` regenerates in memory, compares with the files, prints every
difference case by case, and exits 1 if there is one.

An outside implementation reads the vectors with :func:`load_vectors`,
decodes opaque values with :func:`decode_value`, and can compare its outputs
with :func:`run_family`. The format is documented in ``spec/VECTORS.md``.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TypedDict, cast

from .codec import FORMAT_VERSION, Json, JsonObject, VectorFormatError
from .families import FAMILIES

__all__ = [
    "REGENERATE",
    "WIDTH",
    "VectorCase",
    "VectorFile",
    "check",
    "default_directory",
    "describe_differences",
    "dumps",
    "generate_all",
    "load_vectors",
    "main",
    "render_family",
    "run_family",
]

REGENERATE = "python -m elastic_loader.testing.vectors generate"
DESCRIPTION = "Language-neutral test vectors: generate, check, and read them."
"""The command's description (``--help``)."""
WIDTH = 100
"""A container whose compact form fits in this many columns (with its indent) stays on one line."""


class VectorCase(TypedDict):
    """One case as stored: ``output`` is what an implementation must compute from ``input``."""

    name: str
    description: str
    input: JsonObject
    output: JsonObject


class VectorFile(TypedDict):
    """One ``<family>.json`` file."""

    family: str
    format_version: int
    summary: str
    regenerate: str
    cases: list[VectorCase]


# ---------------------------------------------------------------- canonical text


def _is_scalar(value: Json) -> bool:
    return not isinstance(value, (list, dict))


def _render(value: Json, indent: int) -> str:
    compact = json.dumps(value, ensure_ascii=True, allow_nan=False, separators=(", ", ": "))
    if _is_scalar(value) or indent + len(compact) <= WIDTH:
        return compact
    if isinstance(value, list) and all(_is_scalar(v) for v in value):
        return compact
    pad = " " * (indent + 2)
    if isinstance(value, list):
        items = [pad + _render(v, indent + 2) for v in value]
        return "[\n" + ",\n".join(items) + "\n" + " " * indent + "]"
    assert isinstance(value, dict)
    items = [f"{pad}{json.dumps(k, ensure_ascii=True)}: {_render(v, indent + 2)}" for k, v in value.items()]
    return "{\n" + ",\n".join(items) + "\n" + " " * indent + "}"


def dumps(value: Json) -> str:
    """Canonical text of a JSON value: key order as given, arrays of scalars on one line, final newline."""
    return _render(value, 0) + "\n"


def render_family(family: str) -> str:
    """Build every case of ``family`` (running the model and its invariant checks) and render the file."""
    entry = FAMILIES[family]
    cases: list[Json] = []
    seen: set[str] = set()
    for case in entry.cases():
        if case.name in seen:
            raise ValueError(f"{family}: two cases are named {case.name!r}")
        seen.add(case.name)
        vector = case.build()
        cases.append(
            {
                "name": case.name,
                "description": case.description,
                "input": vector.input,
                "output": vector.output,
            }
        )
    document: JsonObject = {
        "family": family,
        "format_version": FORMAT_VERSION,
        "summary": entry.summary,
        "regenerate": REGENERATE,
        "cases": cases,
    }
    return dumps(document)


def generate_all() -> dict[str, str]:
    """File name -> canonical text, for every family."""
    return {f"{family}.json": render_family(family) for family in FAMILIES}


# ---------------------------------------------------------------- reading


def default_directory() -> Path:
    """Where the committed vectors live.

    ``$ELASTIC_LOADER_VECTORS`` if set; else ``spec/vectors`` of the source
    checkout this module was imported from; else ``spec/vectors`` under the
    current directory.
    """
    env = os.environ.get("ELASTIC_LOADER_VECTORS")
    if env:
        return Path(env)
    checkout = Path(__file__).resolve().parents[4] / "spec"
    if checkout.is_dir():
        return checkout / "vectors"
    return Path("spec") / "vectors"


def _read_file(path: Path) -> VectorFile:
    document = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(document, dict) or not isinstance(document.get("cases"), list):
        raise VectorFormatError(f"{path} is not a vector file")
    version = document.get("format_version")
    if version != FORMAT_VERSION:
        raise VectorFormatError(f"{path} has format_version {version}, this reader knows {FORMAT_VERSION}")
    for case in document["cases"]:
        if not isinstance(case, dict) or set(case) != {"name", "description", "input", "output"}:
            raise VectorFormatError(f"{path}: malformed case {case!r:.200}")
    return cast(VectorFile, document)


def load_vectors(family: str, directory: Path | str | None = None) -> list[VectorCase]:
    """The cases of one family, as stored (opaque values still encoded; see :func:`decode_value`).

    Args:
        family: a key of :data:`FAMILIES`, e.g. ``"row_order"``.
        directory: the vectors directory; :func:`default_directory` when omitted.

    Raises:
        FileNotFoundError: the family's file is missing.
        VectorFormatError: the file is not a vector file of this format version.
    """
    base = default_directory() if directory is None else Path(directory)
    return _read_file(base / f"{family}.json")["cases"]


def run_family(
    family: str,
    implementation: Callable[[JsonObject], JsonObject],
    directory: Path | str | None = None,
    cases: Sequence[VectorCase] | None = None,
) -> list[str]:
    """Run ``implementation`` on every case input of ``family``; describe each output that differs.

    Outputs are compared exactly as JSON values (after both are brought into
    canonical form by the implementation); ``spec/VECTORS.md`` lists the forms an
    implementation must normalise before comparing.
    """
    stored = load_vectors(family, directory) if cases is None else list(cases)
    failures: list[str] = []
    for case in stored:
        got = implementation(case["input"])
        if json.dumps(got, sort_keys=False) != json.dumps(case["output"], sort_keys=False):
            diff = difflib.unified_diff(
                dumps(case["output"]).splitlines(),
                dumps(got).splitlines(),
                "expected",
                "got",
                lineterm="",
                n=1,
            )
            failures.append(f"{family}/{case['name']}:\n" + "\n".join(list(diff)[:40]))
    return failures


# ---------------------------------------------------------------- comparing files


def describe_differences(name: str, expected: str, actual: str | None, max_lines: int = 30) -> list[str]:
    """Human-readable differences between a fresh rendering and the committed text of one file."""
    if actual is None:
        return [f"{name}: missing (run `{REGENERATE}`)"]
    if actual == expected:
        return []
    try:
        old = json.loads(actual)
        new = json.loads(expected)
    except json.JSONDecodeError as error:
        return [f"{name}: committed file is not valid JSON ({error})"]
    out = [
        f"{name}: {key} is {old.get(key)!r}, expected {new.get(key)!r}"
        for key in ("family", "format_version", "summary", "regenerate")
        if old.get(key) != new.get(key)
    ]
    old_cases = [c for c in old.get("cases", []) if isinstance(c, dict)]
    out += _case_differences(name, old_cases, new["cases"], max_lines)
    if [c.get("name") for c in old_cases] != list(dict.fromkeys(c["name"] for c in new["cases"])) and not out:
        out.append(f"{name}: cases are in a different order")
    if not out:
        line = next(
            i
            for i, (a, b) in enumerate(zip([*actual.splitlines(), ""], [*expected.splitlines(), ""]))
            if a != b
        )
        out.append(f"{name}: same content, different formatting from line {line + 1}")
    return out


def _case_differences(
    name: str,
    committed: Sequence[Mapping[str, Json]],
    generated: Sequence[Mapping[str, Json]],
    max_lines: int,
) -> list[str]:
    """Cases missing from either side, and a diff of every case whose content differs."""
    old_cases = {c.get("name"): c for c in committed}
    new_cases = {c["name"]: c for c in generated}
    out = [
        f"{name}: case {n!r} is missing from the committed file" for n in new_cases.keys() - old_cases.keys()
    ]
    out += [
        f"{name}: case {n!r} is committed but no longer generated"
        for n in old_cases.keys() - new_cases.keys()
    ]
    for case_name, case in new_cases.items():
        old = old_cases.get(case_name)
        if old is None or old == case:
            continue
        diff = difflib.unified_diff(
            dumps(cast(Json, old)).splitlines(),
            dumps(cast(Json, case)).splitlines(),
            "committed",
            "generated",
            lineterm="",
            n=2,
        )
        lines = list(diff)
        shown = lines[:max_lines] + (
            [f"... {len(lines) - max_lines} more diff lines"] if len(lines) > max_lines else []
        )
        out.append(f"{name}: case {case_name!r} differs:\n" + "\n".join(shown))
    return out


def check(directory: Path, fresh: Mapping[str, str] | None = None) -> list[str]:
    """Every difference between the files in ``directory`` and a fresh generation.

    Args:
        directory: the vectors directory to check.
        fresh: the output of :func:`generate_all`, when the caller already has it.
    """
    fresh = generate_all() if fresh is None else fresh
    problems: list[str] = []
    for name, text in fresh.items():
        path = directory / name
        problems += describe_differences(
            name, text, path.read_text(encoding="utf-8") if path.exists() else None
        )
    if directory.is_dir():
        for path in sorted(directory.glob("*.json")):
            if path.name not in fresh:
                problems.append(f"{path.name}: not a vector family (delete it or add the family)")
    return problems


# ---------------------------------------------------------------- command line


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m elastic_loader.testing.vectors``."""
    parser = argparse.ArgumentParser(prog="python -m elastic_loader.testing.vectors", description=DESCRIPTION)
    sub = parser.add_subparsers(dest="command", required=True)
    gen = sub.add_parser("generate", help="write one JSON file per family")
    gen.add_argument("--out", type=Path, default=None, help="output directory (default: spec/vectors)")
    chk = sub.add_parser("check", help="compare the committed files with a fresh generation")
    chk.add_argument("--dir", type=Path, default=None, help="vectors directory (default: spec/vectors)")
    args = parser.parse_args(argv)
    if args.command == "generate":
        out: Path = args.out or default_directory()
        out.mkdir(parents=True, exist_ok=True)
        for name, text in generate_all().items():
            (out / name).write_text(text, encoding="utf-8")
            cases = len(json.loads(text)["cases"])
            print(f"{out / name}: {cases} cases, {len(text.encode())} bytes")
        for path in sorted(out.glob("*.json")):
            if path.stem not in FAMILIES:
                print(f"warning: {path} is not a vector family", file=sys.stderr)
        return 0
    directory: Path = args.dir or default_directory()
    problems = check(directory)
    for problem in problems:
        print(problem)
    if problems:
        print(f"{len(problems)} difference(s); regenerate with `{REGENERATE}` if the change is intended")
        return 1
    print(f"{directory}: all {len(FAMILIES)} families match the model")
    return 0
