"""Differential tests: the conformance state machines against ``lancedb.streaming`` and elastic-loader.

The machines (``elastic_loader.testing.machines``) drive an implementation and
the executable spec side by side and report, per named invariant, whether the
implementation kept it. The reference is known to break some invariants on
purpose or by accident (the B-ids of ``spec/REFERENCE.md``; the D-ids are our
recorded deviations). They are pinned once, in the conformance suite's
:data:`~elastic_loader.testing.conformance.KNOWN_REFERENCE_RESULTS`; the in-process
machines' run of the reference against that pin is ``tests/conformance/test_conformance.py``,
and here the real-worker-process machine is held to it, so a test fails both when
the reference breaks a new invariant and when it stops breaking a pinned one. Our
pipeline is held to no violations at all.

Runs are derandomized so the pinned sets are reproducible; the example counts
scale with the Hypothesis profile (``ci`` by default, ``deep`` for ``make deep``).
"""

from __future__ import annotations

import inspect
import logging
import pickle
import warnings
from collections.abc import Iterator, Mapping

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, settings

import elastic_loader
from elastic_loader.testing.adapters import ModuleImplementation, implementation_from_module
from elastic_loader.testing.conformance import known_violations
from elastic_loader.testing.machines import (
    DifferentialMachine,
    PackedMachine,
    ProcessMachine,
    RowMachine,
    check_invariants,
)
from elastic_loader.testing.machines.judges import DIFFERENTIAL_CHECKED
from elastic_loader.testing.tables import (
    FaultyTransform,
    InjectedFault,
    TableCache,
    TableKey,
    document,
    fault_row,
    spec_permutation,
)

REFERENCE = "lancedb.streaming"

MACHINE_KEYS: dict[type[DifferentialMachine], str] = {
    RowMachine: "row",
    PackedMachine: "packed",
    ProcessMachine: "process",
}


def pinned(machine: type[DifferentialMachine]) -> dict[str, str]:
    """The reference's known violations on ``machine``, from the conformance suite's one pin list."""
    return known_violations(MACHINE_KEYS[machine])


PIPELINE_MISSING = not hasattr(elastic_loader, "StreamingDataset")


def _settings(examples: int, steps: int) -> settings:
    """Settings that grow with the profile. ``ci`` is derandomized (the same examples on every
    run); ``deep`` runs about eight times as many examples, each four times as long (tens of
    thousands of steps per machine), from a random seed, so each deep run explores new ground."""
    factor = settings.default.max_examples // 600
    return settings(
        max_examples=max(examples, examples * factor),
        stateful_step_count=steps * max(1, factor // 2),
        derandomize=factor <= 1,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )


FAST = _settings(60, 25)
PROCESSES = _settings(2, 2)


@pytest.fixture(scope="module")
def tables(tmp_path_factory: pytest.TempPathFactory) -> TableCache:
    return TableCache(tmp_path_factory.mktemp("lance-tables"))


@pytest.fixture(autouse=True)
def _quiet() -> Iterator[None]:
    """The reference logs a warning per skipped batch ("warn") and warns about "auto"."""
    logging.disable(logging.WARNING)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield
    logging.disable(logging.NOTSET)


def _check_pinned(results: Mapping[str, str | None], pinned: Mapping[str, str]) -> None:
    assert set(results) == set(DIFFERENTIAL_CHECKED)  # the single-table machines' names
    violated = {name for name, text in results.items() if text}
    unexpected = {name: results[name] for name in sorted(violated - set(pinned))}
    vanished = sorted(set(pinned) - violated)
    lines = [f"new violation of {name}:\n{text}" for name, text in unexpected.items()]
    lines += [f"{name} no longer violated (pinned: {pinned[name]})" for name in vanished]
    assert not lines, "\n\n".join(lines)


def test_a_bound_machine_keeps_its_source(tables: TableCache) -> None:
    """Hypothesis seeds a derandomized run from the machine class's source (``function_digest``): a
    bound machine must resolve to the same source, or its examples would depend on who binds it."""
    implementation = implementation_from_module("elastic_loader")
    for machine in MACHINE_KEYS:
        bound = machine.bind(implementation, tables, enforced=frozenset(), observed={})
        assert bound.__name__ == machine.__name__
        assert inspect.getsource(bound) == inspect.getsource(machine)


def test_a_violation_shrinks_to_a_replayable_program(tables: TableCache) -> None:
    """B1 shrinks to a short program: two ranks, one consumes, one checkpoint."""
    results = check_invariants(
        RowMachine,
        implementation_from_module(REFERENCE),
        tables,
        settings_=_settings(20, 10),
        shrink=["HonestProgressInv"],
        shrink_seconds=10,
    )
    text = results["HonestProgressInv"]
    assert text is not None
    program = [line for line in text.splitlines() if line.startswith(("state.", "checkpoints_"))]
    assert program[0].startswith("state.setup(")
    assert any("take_checkpoint" in line or "merge_latest" in line or "loader_" in line for line in program)
    assert len(program) <= 6, text


@pytest.mark.slow
def test_reference_with_real_worker_processes(tables: TableCache) -> None:
    """``StreamingDataLoader(num_workers=2, multiprocessing_context="spawn")``; fork crashes the reference."""
    results = check_invariants(
        ProcessMachine, implementation_from_module(REFERENCE), tables, settings_=PROCESSES, shrink=False
    )
    _check_pinned(results, pinned(ProcessMachine))


@pytest.mark.skipif(PIPELINE_MISSING, reason="elastic_loader.StreamingDataset is not implemented yet")
@pytest.mark.parametrize("machine", [RowMachine, PackedMachine], ids=lambda m: m.__name__)
def test_pipeline_keeps_every_invariant(machine: type[DifferentialMachine], tables: TableCache) -> None:
    results = check_invariants(
        machine, implementation_from_module("elastic_loader"), tables, settings_=FAST, shrink=False
    )
    _check_pinned(results, {})


@pytest.mark.slow
@pytest.mark.skipif(PIPELINE_MISSING, reason="elastic_loader.StreamingDataset is not implemented yet")
def test_pipeline_with_real_worker_processes(tables: TableCache) -> None:
    results = check_invariants(
        ProcessMachine,
        implementation_from_module("elastic_loader"),
        tables,
        settings_=PROCESSES,
        shrink=False,
    )
    _check_pinned(results, {})


@pytest.mark.skipif(PIPELINE_MISSING, reason="elastic_loader.StreamingDataset is not implemented yet")
def test_a_load_that_skips_the_digest_breaks_ReachableLoadInv(tables: TableCache) -> None:
    """Our pipeline, except that ``load_state_dict`` drops the integrity digest first: it loads an
    edited progress value, which the machines must report as ``ReachableLoadInv`` and nothing else
    (what it loads unedited is what the pipeline writes)."""

    class NoDigestCheck(elastic_loader.StreamingDataset):
        def load_state_dict(self, state: Mapping[str, object]) -> None:
            extra = state.get("elastic_loader")
            plain = dict(state)
            if isinstance(extra, Mapping):
                plain["elastic_loader"] = {k: v for k, v in extra.items() if k != "digest"}
            super().load_state_dict(plain)

    fake = ModuleImplementation(
        "no-digest-check",
        NoDigestCheck,
        elastic_loader.StreamingDataLoader,
        lambda states: elastic_loader.merge_state_dicts([dict(s) for s in states]),
    )
    results = check_invariants(RowMachine, fake, tables, settings_=_settings(12, 10), shrink=False)
    violated = {name for name, text in results.items() if text}
    assert violated == {"ReachableLoadInv"}, {name: results[name] for name in violated}


def test_tables_and_their_spec_permutation(tables: TableCache) -> None:
    """The helpers the machines stand on: ids, fragments, nulls, the permutation, the faulty transform."""
    key = TableKey(17, 3, frozenset({4}))
    table = tables.table(key)
    row_ids = table.to_lance().to_table(columns=["id"], with_row_id=True).column("_rowid").to_pylist()  # type: ignore[attr-defined]
    assert max(row_ids) >= 2**33, "three fragments: LanceDB row ids are not storage offsets"
    docs = tables.documents(key)
    assert docs[4] is None and docs[5] == document(5) and set(docs) == set(range(17))

    sequential = tables.permutation(key, num_splits=4, shuffle_seed=5, epoch=0, shuffle=False, filter=None)
    assert sequential == tuple(tuple(range(4 * k, 4 * k + 4)) for k in range(4))  # the 17th row is dropped
    filtered = tables.permutation(key, num_splits=2, shuffle_seed=5, epoch=0, shuffle=False, filter="id >= 5")
    assert filtered == (tuple(range(5, 11)), tuple(range(11, 17)))
    shuffled = tables.permutation(key, num_splits=4, shuffle_seed=5, epoch=1, shuffle=True, filter=None)
    flat = [i for split in shuffled for i in split]
    assert len(flat) == len(set(flat)) == 16 and set(flat) <= set(range(17)) and flat != sorted(flat)
    collision = spec_permutation(table, num_splits=4, shuffle_seed=5 + 100003, epoch=0)
    assert collision == shuffled  # perm_seed(5, 1) == perm_seed(5 + 100003, 0)

    transform = pickle.loads(pickle.dumps(FaultyTransform([3])))
    assert transform(pa.record_batch({"id": [1, 2]})) == [{"id": 1}, {"id": 2}]
    with pytest.raises(InjectedFault) as caught:
        transform(pa.record_batch({"id": [2, 3, 4]}))
    assert fault_row(caught.value) == 3
