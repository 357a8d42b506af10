"""The machine checks of ``proofs/`` in quick mode, and traceability between invariants, proofs and checks.

Every name of ``INVARIANT_NAMES`` must have a written proof ``proofs/<Name>.md``
(with Statement, Assumptions and Proof sections, or a "tested only" marker
with its reason) and a registered machine check; every SMT lemma must be
proved and every bounded check must pass with its quick bounds. The last
tests show the checks can fail: a false or vacuous lemma is refused, a lemma
about a wrong formula is refused, and a mutated model is caught.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import z3

from elastic_loader.spec.invariants import INVARIANT_NAMES, InvariantViolation

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from proofs import cli, encodings, smt  # noqa: E402
from proofs.framework import BoundedCheck, Bounds, Lemma, Recorder, prove, run_bounded  # noqa: E402
from proofs.mutations import MUTATIONS, Mutation, run_mutation  # noqa: E402
from proofs.registry import REGISTRY  # noqa: E402

PROOFS = ROOT / "proofs"
SECTIONS = ("## Statement", "## Assumptions", "## Proof")
TESTED_ONLY = re.compile(r"^tested only: \S.*", re.MULTILINE | re.IGNORECASE)

ALL_LEMMAS = [lemma for entry in REGISTRY.values() for lemma in entry.lemmas]
ALL_BOUNDED = [check for entry in REGISTRY.values() for check in entry.bounded]


# ---------------------------------------------------------------- traceability


def test_registry_is_keyed_by_exactly_the_invariant_names() -> None:
    assert list(REGISTRY) == list(INVARIANT_NAMES)
    for name, entry in REGISTRY.items():
        assert entry.name == name
        assert entry.bounded, f"{name} has no bounded check"
        assert all(c.invariant == name for c in entry.bounded)
        assert all(lemma.invariant == name for lemma in entry.lemmas)


@pytest.mark.parametrize("name", INVARIANT_NAMES)
def test_written_proof(name: str) -> None:
    path = PROOFS / f"{name}.md"
    assert path.is_file(), f"missing written proof {path}"
    text = path.read_text()
    assert text.startswith(f"# {name}\n"), f"{path} must start with the heading '# {name}'"
    if not TESTED_ONLY.search(text):
        missing = [s for s in SECTIONS if not re.search(rf"^{re.escape(s)}\s*$", text, re.MULTILINE)]
        assert not missing, f"{path} lacks {missing}"
    for lemma in REGISTRY[name].lemmas:
        assert f"`{lemma.name}`" in text, f"{path} does not describe its SMT lemma `{lemma.name}`"


def test_no_stray_proof_files() -> None:
    stray = sorted(
        p.name for p in PROOFS.glob("*.md") if p.stem not in INVARIANT_NAMES and p.name != "README.md"
    )
    assert not stray, f"proof files for unknown invariants: {stray}"


def test_readme_lists_every_invariant() -> None:
    readme = (PROOFS / "README.md").read_text()
    for name in INVARIANT_NAMES:
        assert f"[{name}]({name}.md)" in readme, f"proofs/README.md does not link {name}"


# ---------------------------------------------------------------- the checks themselves


@pytest.mark.parametrize("lemma", ALL_LEMMAS, ids=[f"{x.invariant}.{x.name}" for x in ALL_LEMMAS])
def test_lemma_proved(lemma: Lemma) -> None:
    result = prove(lemma)
    assert result.proved, result.detail


@pytest.mark.parametrize("check", ALL_BOUNDED, ids=[f"{c.invariant}-{i}" for i, c in enumerate(ALL_BOUNDED)])
def test_bounded_quick(check: BoundedCheck) -> None:
    result = run_bounded(check, quick=True)
    assert result.failure is None, result.failure
    assert result.states > 0


def test_cli_quick_output(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--quick", "--no-progress", "--only", "PartitionInv"]) == 0
    out = capsys.readouterr().out
    assert "  proved   blocks_tile:" in out
    assert re.search(r"checked up to num_splits<=\d+.*: \d+ states", out)
    assert "0 failure(s)" in out


def test_cli_exit_status_on_failure(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(
        rank: encodings.Num, worker: encodings.Num, per_rank: encodings.Num, per_worker: encodings.Num
    ) -> tuple[encodings.Num, encodings.Num]:
        lo = rank * per_rank + worker * per_worker
        return lo, lo + per_worker + 1

    monkeypatch.setattr(encodings, "worker_block", broken)
    assert cli.main(["--quick", "--no-progress", "--only", "PartitionInv"]) == 1
    out = capsys.readouterr().out
    assert "FAILED   lemma blocks_tile" in out and "counterexample" in out
    assert "FAILED   bounded check" in out and "configuration: num_splits=" in out


def test_cli_rejects_unknown_invariant(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--only", "NoSuchInv"])
    assert exit_info.value.code == 2
    assert "unknown invariant" in capsys.readouterr().err


# ---------------------------------------------------------------- the checks can fail


def test_false_lemma_is_refused_with_a_counterexample() -> None:
    a, b = z3.Ints("a b")
    lemma = Lemma(
        "X", "false", "max is min", lambda: [("max == min", encodings.imax(a, b) == encodings.imin(a, b))]
    )
    result = prove(lemma)
    assert not result.proved
    assert "counterexample" in result.detail


def test_vacuous_lemma_is_refused() -> None:
    x = z3.Int("x")
    lemma = Lemma(
        "X",
        "vacuous",
        "anything from nothing",
        lambda: [("x>1 & x<0 => false", z3.Implies(z3.And(x > 1, x < 0), False))],
    )
    result = prove(lemma)
    assert not result.proved
    assert "vacuous" in result.detail


def test_partition_lemma_refuses_an_off_by_one_block(monkeypatch: pytest.MonkeyPatch) -> None:
    def shifted(
        rank: encodings.Num, worker: encodings.Num, per_rank: encodings.Num, per_worker: encodings.Num
    ) -> tuple[encodings.Num, encodings.Num]:
        lo = rank * per_rank + worker * per_worker
        return lo, lo + per_worker + 1

    monkeypatch.setattr(encodings, "worker_block", shifted)
    (lemma,) = [x for x in smt.LEMMAS if x.name == "blocks_tile"]
    assert not prove(lemma).proved


def test_bounded_check_reports_the_configuration() -> None:
    def predicate(value: int) -> None:
        if value == 3:
            raise InvariantViolation("DemoInv", "three is bad")

    def run(rec: Recorder, b: Bounds) -> None:
        for value in range(b["n"]):
            rec.at(value=value)
            rec.apply(predicate, value)

    check = BoundedCheck("DemoInv", "n<{n}", quick={"n": 5}, full={"n": 5}, run=run)
    result = run_bounded(check, quick=True)
    assert result.failure is not None
    assert "three is bad" in result.failure and "value=3" in result.failure
    assert result.states == 4


def test_mutated_model_is_caught() -> None:
    """A scratch copy of the model with ``join_row`` taking the minimum fails MergeExactProp's check."""
    (chosen,) = [m for m in MUTATIONS if m.name == "join-min"]
    failed, output, _ = run_mutation(chosen, quick=True, invariants=["MergeExactProp"])
    assert failed == ["MergeExactProp"], output


@pytest.mark.parametrize("mutation", MUTATIONS, ids=lambda m: m.name)
def test_every_mutation_still_matches_the_model_exactly_once(mutation: Mutation) -> None:
    """A mutation whose text no longer occurs in the model (after a refactor) would stop
    ``proofs.mutations`` with an error; this keeps the table runnable."""
    model = Path(__file__).resolve().parents[2] / "src" / "elastic_loader" / "spec"
    found = (model / mutation.path).read_text().count(mutation.old)
    assert found == 1, f"{mutation.name}: {mutation.old!r} occurs {found} times"
