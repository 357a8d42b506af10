"""The conformance suite as a product: ``run_conformance``, the ``elastic-loader`` CLI and the pytest plugin.

* Our pipeline goes through :func:`run_conformance` exactly as an outside
  implementation would, and keeps every invariant the machines check.
* ``lancedb.streaming`` goes through the same entry point and breaks exactly the
  invariants and vector cases pinned in
  :data:`~elastic_loader.testing.conformance.KNOWN_REFERENCE_RESULTS` (each with
  its B-id), so a change on either side is noticed.
* The CLI (run in-process through ``main``) and the plugin (through
  ``pytester``) are exercised against a small fake implementation that breaks
  one invariant on purpose: our pipeline with its checkpoint keys reversed.

Machine runs are derandomized; example counts scale with the Hypothesis
profile like ``tests/conformance/test_differential.py``.
"""

from __future__ import annotations

import importlib.metadata
import json
import re
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import settings

import elastic_loader
from elastic_loader import StreamingDataLoader, __version__, merge_state_dicts
from elastic_loader.cli import main
from elastic_loader.spec.invariants import INVARIANT_NAMES
from elastic_loader.testing import ConformanceReport, implementation_from_module, run_conformance
from elastic_loader.testing.adapters import ModuleImplementation, accepts
from elastic_loader.testing.conformance import (
    KNOWN_REFERENCE_RESULTS,
    REFERENCE,
    VECTOR_FAMILIES,
    compare_with_known,
    conformance_settings,
    reference_results,
    resolve_implementation,
)
from elastic_loader.testing.conformance.known_reference import FIXED_IN
from elastic_loader.testing.machines import CHECKED, NOT_CHECKED
from elastic_loader.testing.machines.judges import MIXTURE_CHECKED

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[2]

IN_PROCESS = ("row", "packed")
WITH_MIXTURES = (*IN_PROCESS, "mixture")
"""The pipeline runs the mixture machine too; for the reference it does not apply (never runs)."""

PIPELINE_VECTOR_BUGS: dict[str, set[str]] = {}
"""Vector cases our pipeline fails today, by family (none; the last were packed states with
impossible packing settings, which ``merge_state_dicts`` accepted until mutation testing found it,
docs/MUTATION.md)."""

FAKE = '''
"""elastic-loader with its checkpoint keys in reverse order: breaks CheckpointRoundTripInv only."""
import elastic_loader
from elastic_loader import StreamingDataLoader, merge_state_dicts


class StreamingDataset(elastic_loader.StreamingDataset):
    def state_dict(self):
        return dict(reversed(list(super().state_dict().items())))


def make_implementation():
    from elastic_loader.testing import implementation_from_module

    return implementation_from_module(__name__)
'''


def _settings(examples: int, steps: int) -> dict[str, settings]:
    """``examples`` grows with the profile (``deep``: about eight times as many)."""
    profile = settings.default
    assert profile is not None
    scaled = max(examples, examples * profile.max_examples // 600)
    return conformance_settings(scaled, steps)


@pytest.fixture(scope="module")
def tables_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("conformance-tables")


@pytest.fixture(scope="module")
def reference_report(tables_dir: Path) -> ConformanceReport:
    return run_conformance(
        REFERENCE, settings=_settings(60, 25), machines=WITH_MIXTURES, tables_dir=tables_dir, shrink=False
    )


@pytest.fixture(scope="module")
def pipeline_report(tables_dir: Path) -> ConformanceReport:
    return run_conformance(
        "elastic_loader",
        settings=_settings(60, 25),
        machines=WITH_MIXTURES,
        tables_dir=tables_dir,
        shrink=False,
    )


@pytest.fixture
def fake_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    (tmp_path / "fakeimpl.py").write_text(FAKE, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "fakeimpl"
    sys.modules.pop("fakeimpl", None)


# ---------------------------------------------------------------- run_conformance


def test_pipeline_keeps_every_invariant_through_the_public_entry_point(
    pipeline_report: ConformanceReport,
) -> None:
    statuses = {r.name: r.status for r in pipeline_report.invariants}
    assert list(statuses) == list(INVARIANT_NAMES)
    failed = {r.name: r.counterexample for r in pipeline_report.invariants if r.status == "fail"}
    assert not failed, "\n\n".join(f"{name}:\n{text}" for name, text in failed.items())
    assert {n for n, s in statuses.items() if s == "pass"} == set(CHECKED)
    assert statuses["SplitSizeInv"] == "not-checked"
    for name in ("ComputedBijectionInv", "LocalBijectionInv", "LocalLocalityInv", "LocalDegeneracyInv"):
        assert statuses[name] == "pass", name  # the machines draw permutation= kinds for us
    assert statuses["TableVersionPinInv"] == "not-checked"
    checked_by = {r.name: r.checked_by for r in pipeline_report.invariants}
    assert all(checked_by[name] == ("mixture",) for name in MIXTURE_CHECKED)
    assert [r.machine for r in pipeline_report.runs] == list(WITH_MIXTURES)


def test_pipeline_vectors(pipeline_report: ConformanceReport) -> None:
    failures = {family: set(cases) for family, cases in pipeline_report.vector_failures().items()}
    assert failures == PIPELINE_VECTOR_BUGS
    ran = {v.family for v in pipeline_report.vectors if v.status in ("pass", "fail")}
    assert ran == {"merge", "load", "checkpoint_snapshot", "params"}


def test_reference_breaks_exactly_the_pinned_invariants_and_vectors(
    reference_report: ConformanceReport,
) -> None:
    problems = compare_with_known(reference_report, reference_results())
    assert not problems, "\n\n".join(problems)
    assert reference_report.implementation == REFERENCE
    assert not reference_report.passed


def test_reference_results_by_release() -> None:
    """0.40 is the base pin; a later release loses exactly the cases fixed in it or before, each of
    which the base pins (so a fix cannot name a case the pin lost)."""
    assert reference_results((0, 40)) == KNOWN_REFERENCE_RESULTS
    for release, families in FIXED_IN.items():
        later = reference_results(release)
        assert later.invariants == KNOWN_REFERENCE_RESULTS.invariants
        for family, cases in KNOWN_REFERENCE_RESULTS.vectors.items():
            fixed = set(families.get(family, {}))
            assert fixed <= set(cases), (release, family, fixed - set(cases))
            assert set(later.vectors[family]) == set(cases) - fixed
        before = (release[0], release[1] - 1)
        assert set(reference_results(before).vectors["merge"]) >= set(later.vectors["merge"])


def test_reference_has_no_mixtures_so_their_invariants_are_not_applicable(
    reference_report: ConformanceReport,
) -> None:
    """The mixture machine was selected but does not apply: it never ran, and its four names are
    ``not-applicable`` with the reason (never ``pass``, never ``fail``)."""
    assert "mixture" not in {r.machine for r in reference_report.runs}
    for name in MIXTURE_CHECKED:
        result = reference_report.result(name)
        assert result.status == "not-applicable", result
        assert result.note is not None and "no mixtures" in result.note
    assert set(KNOWN_REFERENCE_RESULTS.not_applicable) == set(MIXTURE_CHECKED)
    assert "not applicable" in reference_report.to_table()


def test_every_pinned_reference_violation_names_its_weak_point() -> None:
    """Each reason opens with the reference's weak point (a B-id of spec/REFERENCE.md) or, for a
    save-protocol rule the reference has no weak-point entry for, our deviation (a D-id of
    spec/DEVIATIONS.md); the id must exist there."""
    weak_points = (ROOT / "spec" / "REFERENCE.md").read_text(encoding="utf-8")
    deviations = (ROOT / "spec" / "DEVIATIONS.md").read_text(encoding="utf-8")
    for name, known in KNOWN_REFERENCE_RESULTS.invariants.items():
        assert name in CHECKED
        first = re.match(r"[BD]\d+", known.reason)
        assert first is not None, known.reason
        ident = first.group()
        where = f"| {ident} |" in weak_points if ident[0] == "B" else f"### {ident} —" in deviations
        assert where, f"{name}: {ident} is not in spec/REFERENCE.md or spec/DEVIATIONS.md"
    for family, cases in KNOWN_REFERENCE_RESULTS.vectors.items():
        assert family in VECTOR_FAMILIES
        assert all(reason[:1] in "BDN" for reason in cases.values())


def test_report_renders_every_invariant(reference_report: ConformanceReport) -> None:
    data = json.loads(reference_report.to_json())
    assert [r["name"] for r in data["invariants"]] == list(INVARIANT_NAMES)
    assert data["passed"] is False
    assert [r["machine"] for r in data["settings"]["machines"]] == list(IN_PROCESS)  # mixture: n/a
    by_name = {r["name"]: r for r in data["invariants"]}
    for name in KNOWN_REFERENCE_RESULTS.invariants:
        assert by_name[name]["status"] == "fail"
        assert by_name[name]["counterexample"]
    table = reference_report.to_table()
    rows = {
        line.split()[0]: line
        for line in table.splitlines()
        if line.split()[:1] and line.split()[0] in by_name
    }
    for name, row in rows.items():
        assert ("FAIL" in row.split()) == (by_name[name]["status"] == "fail"), row
    for name in KNOWN_REFERENCE_RESULTS.invariants:  # counterexamples follow the tables
        assert f"\n=== {name} (" in table
    for family, cases in reference_report.vector_failures().items():
        assert all(f"\n=== vector {family}/{case} ===" in table for case in cases)


def test_not_checked_when_no_selected_machine_exercises_it(tables_dir: Path) -> None:
    report = run_conformance(
        "elastic_loader",
        settings=_settings(3, 3),
        machines=("row",),
        tables_dir=tables_dir,
        shrink=False,
        vectors=False,
    )
    statuses = {r.name: r.status for r in report.invariants}
    packing_only = {"PackingConservationInv", "DocIdsInv", "AutoBudgetInv", "PackingBudgetProp"}
    not_checked = packing_only | set(NOT_CHECKED) | set(MIXTURE_CHECKED)  # mixture machine not selected
    assert {n for n, s in statuses.items() if s == "not-checked"} == not_checked
    assert report.vectors == ()


def _without_permutation(table: object, **params: object) -> object:
    """``StreamingDataset`` behind a signature without ``permutation=`` (as the reference's)."""
    return elastic_loader.StreamingDataset(table, **params)  # type: ignore[arg-type]


def test_permutation_invariants_need_the_keyword(tables_dir: Path) -> None:
    """An implementation without ``permutation=`` cannot exercise the permutation invariants: they are
    reported not checked, with the reason, instead of passing vacuously."""
    assert accepts(implementation_from_module("elastic_loader"), "permutation")
    impl = ModuleImplementation(
        "no-permutation", _without_permutation, StreamingDataLoader, merge_state_dicts
    )
    assert not accepts(impl, "permutation")
    report = run_conformance(
        impl, settings=_settings(1, 1), machines=("row",), tables_dir=tables_dir, shrink=False, vectors=False
    )
    statuses = {r.name: (r.status, r.note) for r in report.invariants}
    for name in ("ComputedBijectionInv", "LocalBijectionInv", "LocalLocalityInv", "LocalDegeneracyInv"):
        status, note = statuses[name]
        assert status == "not-checked" and note is not None and "permutation=" in note
    assert statuses["CanonicalOrderProp"][0] == "pass"
    for name in MIXTURE_CHECKED:  # it has no mixture classes either (ModuleImplementation without them)
        assert statuses[name][0] == "not-applicable"


class _ShortSchedule(elastic_loader.StreamingMixture):
    """A mixture that reports one global cycle fewer than it schedules: breaks MixtureProportionInv."""

    def schedule(self) -> list[str]:
        return super().schedule()[:-1]


def test_mixture_machine_runs_through_the_conformance_entry_point(tables_dir: Path) -> None:
    """An implementation with mixtures is checked by the mixture machine like any other: a broken
    mixture fails the name it breaks, found by the ``mixture`` machine, and nothing else."""
    impl = replace(implementation_from_module("elastic_loader"), name="short-schedule")
    impl = replace(impl, mixture_class=_ShortSchedule)
    report = run_conformance(
        impl,
        settings=_settings(2, 2),
        machines=("mixture",),
        tables_dir=tables_dir,
        shrink=False,
        vectors=False,
    )
    assert report.violated() == ("MixtureProportionInv",)
    result = report.result("MixtureProportionInv")
    assert result.found_by == ("mixture",) and "global cycles" in (result.counterexample or "")


def test_resolve_implementation_forms(fake_module: str) -> None:
    assert resolve_implementation(fake_module).name == fake_module
    assert resolve_implementation(f"{fake_module}:make_implementation").name == fake_module
    direct = implementation_from_module(fake_module)
    assert resolve_implementation(direct) is direct
    with pytest.raises(AttributeError):
        resolve_implementation("json")
    with pytest.raises(ImportError):
        resolve_implementation("no_such_module_here")
    with pytest.raises(ValueError, match="unknown machine"):
        run_conformance(fake_module, machines=("rows",))


# ---------------------------------------------------------------- the CLI


def test_cli_reports_a_shrunk_counterexample_and_fails(
    fake_module: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "report.json"
    code = main(
        [
            "conformance",
            "--impl",
            fake_module,
            "--machines",
            "row",
            "--examples",
            "10",
            "--steps",
            "10",
            "--shrink-seconds",
            "20",
            "--json",
            str(out),
            "--quiet",
        ]
    )
    printed = capsys.readouterr().out
    assert code == 1
    data = json.loads(out.read_text())
    failed = {r["name"]: r for r in data["invariants"] if r["status"] == "fail"}
    assert set(failed) == {"CheckpointRoundTripInv"}
    text = failed["CheckpointRoundTripInv"]["counterexample"]
    program = [line for line in text.splitlines() if line.startswith(("state", "checkpoints_"))]
    assert program[0] == "state = RowMachine()"
    assert len(program) <= 8, text
    assert re.search(r"^CheckpointRoundTripInv +FAIL", printed, re.MULTILINE), printed
    vectors = {v["family"]: v["status"] for v in data["vectors"]}
    assert vectors["checkpoint_snapshot"] == "fail"


def test_cli_passes_for_a_conforming_run(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["conformance", "--impl", "elastic_loader", "--machines", "row", "--examples", "3", "--steps", "3"]
    code = main([*argv, "--no-vectors", "--quiet", "--json", "-"])
    captured = capsys.readouterr()
    assert code == 0
    assert json.loads(captured.out)["passed"] is True
    assert "PASSED" in captured.err


def test_cli_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["conformance", "--impl", "no_such_module_here", "--quiet"]) == 2
    assert "cannot use --impl" in capsys.readouterr().err
    assert main(["conformance", "--impl", "elastic_loader", "--machines", "rows"]) == 2
    assert main(["conformance"]) == 2
    assert main([]) == 2
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"elastic-loader {__version__}"


def test_cli_without_the_conformance_extra_prints_a_one_line_hint(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "hypothesis", None)  # import hypothesis now raises ImportError
    assert main(["conformance", "--impl", "elastic_loader", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err == "elastic-loader conformance needs hypothesis: pip install 'elastic-loader[conformance]'\n"


# ---------------------------------------------------------------- the pytest plugin


def _plugin_args() -> list[str]:
    """``-p`` the plugin unless the installed entry point loads it already."""
    installed = any(ep.name == "elastic_loader" for ep in importlib.metadata.entry_points(group="pytest11"))
    return [] if installed else ["-p", "elastic_loader.testing.pytest_plugin"]


def test_plugin_is_inert_without_the_option(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_plain="def test_one():\n    assert True\n")
    result = pytester.runpytest_inprocess(*_plugin_args(), "-q")
    result.assert_outcomes(passed=1)


def test_plugin_runs_one_test_per_invariant(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(fakeimpl=FAKE)
    pytester.syspathinsert()
    result = pytester.runpytest_inprocess(
        *_plugin_args(),
        "-v",
        "-p",
        "no:cacheprovider",
        "--elastic-loader-impl",
        "fakeimpl",
        "--elastic-loader-machines",
        "row",
        "--elastic-loader-examples",
        "10",
        "--elastic-loader-steps",
        "10",
        "--elastic-loader-no-shrink",
        "-m",
        "elastic_loader_conformance",
    )
    result.stdout.fnmatch_lines(
        [
            "elastic-loader-conformance::HonestProgressInv PASSED*",
            "elastic-loader-conformance::CheckpointRoundTripInv FAILED*",
            "elastic-loader-conformance::PackingBudgetProp SKIPPED*",
            "elastic-loader-conformance::vectors?topology? SKIPPED*",
            "elastic-loader-conformance::vectors?checkpoint_snapshot? FAILED*",
            "fakeimpl violates CheckpointRoundTripInv (found by the row machine):",
        ]
    )
    outcomes = result.parseoutcomes()
    assert outcomes["passed"] + outcomes["failed"] + outcomes["skipped"] == len(INVARIANT_NAMES) + len(
        VECTOR_FAMILIES
    )


def test_plugin_rejects_an_unknown_implementation(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest_inprocess(*_plugin_args(), "--elastic-loader-impl", "no_such_module_here")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--elastic-loader-impl no_such_module_here*"])
