"""The language-neutral vectors: committed files, the cases that produce them, and their coverage.

* Every case is a test of the spec (its ``build`` runs the model and the
  invariants that apply) and its JSON input replays to its JSON output.
* ``spec/vectors/`` equals a fresh generation, byte for byte.
* Every error code the model can raise from load, merge and constructor
  validation appears in some vector; the codes are read from the model's
  source, not listed by hand. Every code of the delivery arithmetic and of
  saved checkpoints (``spec/ERRORS.md``) appears in some vector too.
* A mutated vector is detected, by ``check`` and by replaying the model.
* The black-box families replay against our pipeline with no failure; an
  implementation without the ``elastic_loader`` key (``lancedb.streaming``) is
  judged on the reference's keys, and a wrong value there still fails.
"""

from __future__ import annotations

import ast
import functools
import importlib
import itertools
import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import elastic_loader.spec as spec
from elastic_loader.testing import vectors
from elastic_loader.testing.vectors import (
    FAMILIES,
    CaseDef,
    VectorFormatError,
    WorkerInfo,
    all_cases,
    decode_value,
    encode_value,
    replay,
)

ROOT = Path(__file__).resolve().parents[2]
VECTOR_DIR = ROOT / "spec" / "vectors"
VECTORS_MD = ROOT / "spec" / "VECTORS.md"
CASES = list(all_cases())


@functools.cache
def _fresh() -> dict[str, str]:
    return vectors.generate_all()


# ---------------------------------------------------------------- every case is a spec test


@pytest.mark.parametrize("case", CASES, ids=[f"{c.family}/{c.name}" for c in CASES])
def test_case(case: CaseDef) -> None:
    """The case's own checks pass, and its JSON input alone reproduces its output."""
    vector = case.build()
    through_json = json.loads(json.dumps(vector.input))
    assert replay(case.family, through_json) == vector.output


def test_case_names_are_unique_identifiers() -> None:
    for family in FAMILIES.values():
        names = [c.name for c in family.cases()]
        assert len(names) == len(set(names)), family.name
        bad = [n for n in names if not re.fullmatch(r"[a-z0-9_]+", n)]
        assert not bad, f"{family.name}: names must be snake_case: {bad}"


# ---------------------------------------------------------------- committed files


def test_committed_vectors_match_a_fresh_generation() -> None:
    problems = vectors.check(VECTOR_DIR, _fresh())
    assert not problems, "spec/vectors/ is stale; run `make vectors`:\n" + "\n".join(problems)


def test_generation_is_byte_identical() -> None:
    assert vectors.generate_all() == _fresh()


def test_every_family_is_non_empty_and_has_a_file() -> None:
    assert sorted(p.stem for p in VECTOR_DIR.glob("*.json")) == sorted(FAMILIES)
    for family in FAMILIES:
        cases = vectors.load_vectors(family, VECTOR_DIR)
        assert cases, family
        assert any("error" not in c["output"] for c in cases), f"{family} has no successful case"


def test_committed_vectors_replay_through_the_reader_api() -> None:
    """What an outside implementation does, with the model as the implementation."""
    for family in FAMILIES:
        assert vectors.run_family(family, functools.partial(replay, family), VECTOR_DIR) == []


def test_vectors_stay_small() -> None:
    total = sum(p.stat().st_size for p in VECTOR_DIR.glob("*.json"))
    assert total < 2_000_000, f"spec/vectors/ holds {total} bytes"


# ---------------------------------------------------------------- mutations are detected


def _mutated_copy(tmp_path: Path, family: str, mutate: object) -> Path:
    target = tmp_path / "vectors"
    shutil.copytree(VECTOR_DIR, target)
    path = target / f"{family}.json"
    document = json.loads(path.read_text())
    assert callable(mutate)
    mutate(document["cases"])
    path.write_text(vectors.dumps(document))
    return target


def test_a_mutated_output_is_detected(tmp_path: Path) -> None:
    def bump_first_row_id(cases: list[dict[str, Any]]) -> None:
        cases[0]["output"]["rows"][0][2] += 1

    target = _mutated_copy(tmp_path, "row_order", bump_first_row_id)
    first = vectors.load_vectors("row_order", VECTOR_DIR)[0]["name"]
    problems = vectors.check(target, _fresh())
    assert len(problems) == 1 and f"case {first!r} differs" in problems[0]
    failures = vectors.run_family("row_order", functools.partial(replay, "row_order"), target)
    assert len(failures) == 1 and failures[0].startswith(f"row_order/{first}:")
    assert vectors.main(["check", "--dir", str(target)]) == 1


def test_a_mutated_input_is_detected(tmp_path: Path) -> None:
    def reverse_a_split(cases: list[dict[str, Any]]) -> None:
        for case in cases:
            if case["name"] == "three_splits_round_robin":
                case["input"]["permutation"][0].reverse()

    target = _mutated_copy(tmp_path, "row_order", reverse_a_split)
    assert any("three_splits_round_robin" in p for p in vectors.check(target, _fresh()))
    failures = vectors.run_family("row_order", functools.partial(replay, "row_order"), target)
    assert [f.split(":")[0] for f in failures] == ["row_order/three_splits_round_robin"]


def test_a_removed_case_and_a_stray_file_are_detected(tmp_path: Path) -> None:
    target = _mutated_copy(tmp_path, "merge", lambda cases: cases.pop())
    (target / "extra.json").write_text("{}")
    problems = vectors.check(target, _fresh())
    assert any("is missing from the committed file" in p for p in problems)
    assert any(p.startswith("extra.json") for p in problems)


# ---------------------------------------------------------------- the value codec


def test_opaque_values_round_trip() -> None:
    value = {
        "big": 2**64 + 1,
        "negative": -(2**63),
        "map": {0: [1], "0": [2], True: None},
        "callable": spec.SpecError,
        "worker": WorkerInfo(1, 4),
        "nested": [{"$": "not a tag"}],
    }
    encoded = encode_value(value)
    text = json.dumps(encoded)
    decoded = decode_value(json.loads(text))
    assert isinstance(decoded, dict)
    assert decoded["big"] == 2**64 + 1 and decoded["negative"] == -(2**63)
    assert decoded["map"] == {0: [1], "0": [2], True: None}
    assert decoded["worker"] == WorkerInfo(1, 4)
    assert callable(decoded["callable"])
    assert decoded["nested"] == [{"$": "not a tag"}]
    assert json.dumps(encode_value(decoded)) == text


def test_unknown_tags_are_rejected() -> None:
    with pytest.raises(VectorFormatError):
        decode_value({"$": "set", "items": [1]})
    with pytest.raises(TypeError):
        encode_value(2.0)


# ---------------------------------------------------------------- error codes, read from the model source

ERROR_CLASSES = {"SpecValueError", "SpecTypeError", "SpecRuntimeError"}
ENTRY_POINTS = ("load_for_rank", "merge_state_dicts", "validate_params")
FAMILIES_OF_ENTRY_POINTS = ("load", "merge", "params")
MODEL_OF_FAMILY = {
    "load": ("load_for_rank",),
    "merge": ("merge_state_dicts",),
    "params": ("validate_params",),
    "checkpoint_snapshot": ("snapshot_saved", "Saved", "Cursor", "TablePin"),
    "loader": ("run_loader",),
    "schedule": (
        "canonical_capacity",
        "canonical_counts",
        "round_robin_turns",
        "next_worker",
        "simulate_pass",
        "Pass",
    ),
    "rank_checkpoint": ("rank_checkpoint", "Pass"),
    "resolve": ("resolve",),
    "table_pin": ("pinned_permutation",),
    "protocols": ("next_starts", "run_session", "Shape"),
}
"""The model functions (a class: its ``__post_init__``) each family's errors come from."""
SAVE_PROTOCOL_SECTIONS = ("Delivery arithmetic", "Saved checkpoints")


class _Function:
    def __init__(self, module: ModuleType, node: ast.FunctionDef) -> None:
        self.module = module
        self.node = node
        self.parents = {child: parent for parent in ast.walk(node) for child in ast.iter_child_nodes(parent)}


@functools.cache
def _spec_functions() -> dict[str, list[_Function]]:
    """Every function and method of the spec by name; a class name maps to its ``__post_init__``."""
    index: dict[str, list[_Function]] = {}
    for path in sorted(Path(spec.__file__).parent.glob("*.py")):
        module = importlib.import_module(f"elastic_loader.spec.{path.stem}")
        tree = ast.parse(path.read_text())
        for top in tree.body:
            if isinstance(top, ast.FunctionDef):
                index.setdefault(top.name, []).append(_Function(module, top))
            elif isinstance(top, ast.ClassDef):
                for item in top.body:
                    if isinstance(item, ast.FunctionDef):
                        key = top.name if item.name == "__post_init__" else item.name
                        index.setdefault(key, []).append(_Function(module, item))
    return index


def _referenced(fn: _Function, index: dict[str, list[_Function]]) -> Iterator[_Function]:
    """Functions ``fn`` calls or passes along (``functools.reduce(join_row, ...)``), over-approximated.

    Type annotations are not references, nor are the classes an ``isinstance`` test names (it runs
    no ``__post_init__``).
    """
    args = fn.node.args
    annotations = [a.annotation for a in [*args.posonlyargs, *args.args, *args.kwonlyargs] if a.annotation]
    annotations += [fn.node.returns] if fn.node.returns else []
    annotations += [n.annotation for n in ast.walk(fn.node) if isinstance(n, ast.AnnAssign)]
    tests = [
        n.args[1]
        for n in ast.walk(fn.node)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "isinstance"
    ]
    skip = {id(n) for a in [*annotations, *tests] for n in ast.walk(a)}
    for node in ast.walk(fn.node):
        if id(node) in skip:
            continue
        name = None
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            name = node.id
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            name = node.func.attr
        if name is not None:
            yield from index.get(name, [])


def _sequences(expr: ast.expr, fn: _Function, index: dict[str, list[_Function]]) -> list[tuple[object, ...]]:
    """The possible values of a sequence-valued expression (a small abstract interpreter)."""
    if isinstance(expr, (ast.Tuple, ast.List)):
        return [tuple(ast.literal_eval(expr))]
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add):
        lefts, rights = _sequences(expr.left, fn, index), _sequences(expr.right, fn, index)
        return [a + b for a, b in itertools.product(lefts, rights)]
    if isinstance(expr, ast.IfExp):
        return _sequences(expr.body, fn, index) + _sequences(expr.orelse, fn, index)
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name):
        out = []
        for callee in index.get(expr.func.id, []):
            returns = [n.value for n in ast.walk(callee.node) if isinstance(n, ast.Return) and n.value]
            out += [v for r in returns for v in _sequences(r, callee, index)]
        return out
    if isinstance(expr, ast.Name):
        params = [a.arg for a in fn.node.args.args]
        if expr.id in params:  # a parameter: every call site's argument
            position = params.index(expr.id)
            out = []
            for callers in index.values():
                for caller in callers:
                    for call in ast.walk(caller.node):
                        if (
                            isinstance(call, ast.Call)
                            and isinstance(call.func, ast.Name)
                            and call.func.id == fn.node.name
                            and len(call.args) > position
                        ):
                            out += _sequences(call.args[position], caller, index)
            return out
        value = getattr(fn.module, expr.id)
        assert isinstance(value, (tuple, list)), f"{expr.id} is not a sequence"
        return [tuple(value)]
    raise AssertionError(f"cannot evaluate {ast.unparse(expr)} in {fn.node.name}")


def _guard_allows(test: ast.expr, binding: dict[str, object]) -> bool:
    """Evaluate ``x is None`` / ``x is not None`` on loop-bound names; anything else may hold."""
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        return all(_guard_allows(v, binding) for v in test.values)
    if (
        isinstance(test, ast.Compare)
        and isinstance(test.left, ast.Name)
        and test.left.id in binding
        and len(test.ops) == 1
        and isinstance(test.comparators[0], ast.Constant)
        and test.comparators[0].value is None
    ):
        value = binding[test.left.id]
        if isinstance(test.ops[0], ast.Is):
            return value is None
        if isinstance(test.ops[0], ast.IsNot):
            return value is not None
    return True


def _codes_of(arg: ast.expr, fn: _Function, index: dict[str, list[_Function]]) -> set[str]:
    """The codes a code argument can take: a literal, or an f-string over loop variables."""
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return {arg.value}
    assert isinstance(arg, ast.JoinedStr), f"code {ast.unparse(arg)} in {fn.node.name} is not a string"
    loops: list[ast.For] = []
    guards: list[ast.expr] = []
    node: ast.AST = arg
    while node in fn.parents:
        parent = fn.parents[node]
        if isinstance(parent, ast.For) and node in parent.body:
            loops.append(parent)
        elif isinstance(parent, ast.If) and node in parent.body:
            guards.append(parent.test)
        node = parent
    codes: set[str] = set()

    def targets(loop: ast.For) -> list[str]:
        if isinstance(loop.target, ast.Name):
            return [loop.target.id]
        assert isinstance(loop.target, ast.Tuple)
        return [t.id if isinstance(t, ast.Name) else "" for t in loop.target.elts]

    choices = []
    for loop in loops:
        names = targets(loop)
        elements = {e for seq in _sequences(loop.iter, fn, index) for e in seq}
        rows = [e if isinstance(e, tuple) and len(names) > 1 else (e,) for e in sorted(elements, key=repr)]
        choices.append([dict(zip(names, row)) for row in rows])
    for combo in itertools.product(*choices):
        binding = {k: v for part in combo for k, v in part.items()}
        if not all(_guard_allows(g, binding) for g in guards):
            continue
        text = ""
        for value in arg.values:
            if isinstance(value, ast.Constant):
                text += str(value.value)
            else:
                assert isinstance(value, ast.FormattedValue) and isinstance(value.value, ast.Name)
                assert value.value.id in binding, f"{ast.unparse(arg)} in {fn.node.name}: not a loop variable"
                text += str(binding[value.value.id])
        codes.add(text)
    return codes


def _model_error_codes(entry_point: str) -> set[str]:
    """Every code a ``require`` or a spec error can carry in code reachable from ``entry_point``."""
    index = _spec_functions()
    todo = list(index[entry_point])
    seen: set[int] = set()
    codes: set[str] = set()
    while todo:
        fn = todo.pop()
        if id(fn.node) in seen:
            continue
        seen.add(id(fn.node))
        todo += _referenced(fn, index)
        for call in ast.walk(fn.node):
            if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Name):
                continue
            position = 1 if call.func.id == "require" else 0 if call.func.id in ERROR_CLASSES else None
            if position is None:
                continue
            arg = call.args[position]
            if isinstance(arg, ast.Name) and arg.id in [a.arg for a in fn.node.args.args]:
                continue  # a helper passing its caller's code along; the call sites are read instead
            codes |= _codes_of(arg, fn, index)
    return codes


def _vector_codes(family: str) -> set[str]:
    """The error codes of a family's outputs (``protocols`` also names the code of a refused step)."""
    codes: set[str] = set()
    for case in vectors.load_vectors(family, VECTOR_DIR):
        refused = case["output"].get("refused")
        for error in (
            case["output"].get("error"),
            refused.get("error") if isinstance(refused, dict) else None,
        ):
            if isinstance(error, dict):
                code = error["code"]
                assert isinstance(code, str)
                codes.add(code)
    return codes


def test_model_error_code_extraction_sees_loops_and_guards() -> None:
    """The extractor itself: templated codes expand over the model's tables, guards filter them."""
    params = _model_error_codes("validate_params")
    assert {"world_size_type", "columns_type", "eos_id_out_of_range", "epoch_out_of_range"} <= params
    assert "prefetch_batches_out_of_range" not in params  # no minimum: the guard excludes it
    load = _model_error_codes("load_packed")
    assert {"epoch_mismatch", "blocks_per_epoch_mismatch", "buffer_key_duplicate", "checkpoint_type"} <= load


def test_every_error_code_of_load_merge_and_params_has_a_vector() -> None:
    derived = set().union(*(_model_error_codes(f) for f in ENTRY_POINTS))
    covered = set().union(*(_vector_codes(f) for f in FAMILIES_OF_ENTRY_POINTS))
    missing = sorted(derived - covered)
    assert not missing, f"error codes without a vector: {missing}"


def _documented_codes(*sections: str) -> set[str]:
    """The codes listed in these sections of ``spec/ERRORS.md``."""
    parts = re.split(r"^## (.+)$", (ROOT / "spec" / "ERRORS.md").read_text(), flags=re.MULTILINE)
    text = "".join(body for title, body in zip(parts[1::2], parts[2::2]) if title.strip() in sections)
    return set(re.findall(r"^\|\s*`([a-z0-9_]+)`\s*\|", text, flags=re.MULTILINE))


def test_every_save_protocol_error_code_has_a_vector() -> None:
    documented = _documented_codes(*SAVE_PROTOCOL_SECTIONS)
    assert len(documented) >= 20, "spec/ERRORS.md sections not found"
    covered = set().union(*(_vector_codes(f) for f in FAMILIES))
    missing = sorted(documented - covered)
    assert not missing, f"error codes without a vector: {missing}"


@pytest.mark.parametrize(("family", "entry_points"), sorted(MODEL_OF_FAMILY.items()))
def test_vector_error_codes_are_ones_the_model_can_raise(family: str, entry_points: tuple[str, ...]) -> None:
    """The other direction: the extractor misses no code a vector shows (it is not too narrow), and
    no family shows a code its model functions cannot raise."""
    derived = set().union(*(_model_error_codes(e) for e in entry_points))
    assert _vector_codes(family) <= derived


# ---------------------------------------------------------------- the documentation


def _sections(text: str) -> dict[str, str]:
    parts = re.split(r"^### `([a-z_]+)`\s*$", text, flags=re.MULTILINE)
    return dict(zip(parts[1::2], parts[2::2]))


def test_every_family_and_field_is_documented() -> None:
    sections = _sections(VECTORS_MD.read_text())
    assert sorted(sections) == sorted(FAMILIES), "spec/VECTORS.md needs one '### `family`' section per family"
    for family, text in sections.items():
        fields: set[str] = set()
        for case in vectors.load_vectors(family, VECTOR_DIR):
            fields |= set(case["input"]) | set(case["output"])
        undocumented = sorted(f for f in fields if f"`{f}`" not in text)
        assert not undocumented, f"spec/VECTORS.md section {family} does not describe {undocumented}"


# ---------------------------------------------------------------- black-box replay


def test_the_pipeline_passes_every_black_box_family(tmp_path: Path) -> None:
    from elastic_loader.testing.conformance import resolve_implementation
    from elastic_loader.testing.conformance.black_box import run_vectors

    results, _ = run_vectors(resolve_implementation("elastic_loader"), tmp_path, VECTOR_DIR, None)
    ran = {r.family for r in results if r.status != "not-applicable"}
    assert ran == {"merge", "load", "checkpoint_snapshot", "params"}
    failures = {r.family: [f"{f.case}: {f.detail}" for f in r.failures] for r in results if r.failures}
    assert not failures
    assert all(r.status == "pass" and r.passed > 0 for r in results if r.family in ran)


def test_a_checkpoint_without_the_extra_key_is_judged_on_the_reference_keys(tmp_path: Path) -> None:
    from elastic_loader.testing.conformance import resolve_implementation
    from elastic_loader.testing.conformance.black_box import _RUNNERS, _VectorContext

    reference = _VectorContext(resolve_implementation("lancedb.streaming"), tmp_path / "reference")
    ours = _VectorContext(resolve_implementation("elastic_loader"), tmp_path / "ours")
    assert not reference.writes_provenance and ours.writes_provenance
    cases = vectors.load_vectors("merge", VECTOR_DIR)
    case = next(c for c in cases if c["name"] == "row_2_ranks_after_3_steps")
    assert "elastic_loader" in case["output"]["checkpoint"]
    assert _RUNNERS["merge"](reference, case) is None
    assert _RUNNERS["merge"](ours, case) is None
    wrong = json.loads(json.dumps(case))
    wrong["output"]["checkpoint"]["samples_consumed_per_split"][0] += 1
    assert _RUNNERS["merge"](reference, wrong) is not None
    without_key = json.loads(json.dumps(case))
    del without_key["output"]["checkpoint"]["elastic_loader"]
    without_key["output"]["keys"].remove("elastic_loader")
    assert _RUNNERS["merge"](ours, without_key) is not None
