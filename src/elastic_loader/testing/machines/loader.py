"""The machines' ``StreamingDataLoader`` runs: one loader, from the start or from a checkpoint.

A run builds a dataset for one rank (loading the checkpoint, or a fresh one
when the implementation rightly rejects it), asks the spec what the loader
delivers (:func:`~elastic_loader.spec.run_loader`) from the checkpoint the
implementation was given and from the job's truth, takes the batches, and
judges the checkpoint committed after them (``ConsumerCommitProp``).

Rules of this module: functions of the machine they run for (its dataset,
load and ``state_dict`` helpers); the loader stays alive until its checkpoint
is taken, as in a training loop; judging is in :mod:`.judges`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from ...spec import (
    CheckpointGate,
    RowState,
    SpecError,
    Topology,
    gate_after_failure,
    rank_splits,
    run_loader,
)
from ...spec import invariants as inv
from ...spec.loader import Delivery, LoaderRun
from ..adapters import DatasetLike
from . import judges
from .model import History, Item, ModelState, attempt, builtin_error, describe, note
from .observe import decode_batch
from .plans import LoaderPlan, SessionPlan
from .sessions import Recorded

if TYPE_CHECKING:
    from .differential import DifferentialMachine


def run(
    machine: DifferentialMachine, record: Recorded | None, loader_plan: LoaderPlan, via_json: bool
) -> Recorded | None:
    """One ``StreamingDataLoader`` run: judge its batches and the checkpoint it commits."""
    plan, rank, batch_size, batches = _shape(machine, loader_plan)
    where = f"StreamingDataLoader(rank {rank}, batch_size={batch_size}, num_workers={machine.loader_workers})"
    opened = _open(machine, plan, rank, record, via_json, where)
    if opened is None:
        return None
    dataset, start, truth, history = opened
    expected = _spec_run(machine, plan, rank, batch_size, start)
    true_run = _spec_run(machine, plan, rank, batch_size, truth)
    summary = (
        f"raises {expected}"
        if isinstance(expected, SpecError)
        else f"delivers {len(expected.deliveries)} batches, then {expected.error or 'ends'}"
    )
    note(f"{where} from {'the start' if record is None else repr(record)}: the spec {summary}")
    iterator = _start(machine, dataset, batch_size, expected, where)
    if iterator is None:
        return None
    assert not isinstance(expected, SpecError)
    # The loader stays alive until the checkpoint is taken, as in a training loop.
    received: list[list[Item]] = []
    failed = _receive(machine, iterator, expected, received, batches, where)
    items = [item for batch in received for item in batch]
    if record is not None and not isinstance(true_run, SpecError):
        truly = [item for d in true_run.deliveries for item in d.items]
        if items != truly[: len(items)]:
            machine._fail(
                "ResumeEquivalenceProp",
                f"{where} from {record!r}: received {items}, the uninterrupted run continues with "
                f"{truly[: len(items)]}",
            )
    _check_history(machine, history, items, where)
    committed = _committed_state(machine, dataset, plan, rank, expected, len(received), failed, where)
    del iterator
    if committed is None:
        return None
    return _record(machine, committed, plan, rank, start, truth, true_run, history, received, where)


def _shape(machine: DifferentialMachine, loader_plan: LoaderPlan) -> tuple[SessionPlan, int, int, int]:
    """The session plan, rank, batch size and batch count of a loader run (aligned: step boundaries)."""
    model, session = machine._model(), machine.session
    assert session is not None
    plan = session.plan
    if loader_plan.world_size:
        plan = machine._fit(replace(plan, world_size=loader_plan.world_size))
    rank = loader_plan.rank % plan.world_size
    nw = machine.loader_workers
    batch_size, batches = loader_plan.batch_size, loader_plan.batches
    if loader_plan.aligned:
        batch_size *= model.config.num_splits // plan.world_size // max(1, nw)
        batches *= max(1, nw)
    return plan, rank, batch_size, batches


def _open(
    machine: DifferentialMachine,
    plan: SessionPlan,
    rank: int,
    record: Recorded | None,
    via_json: bool,
    where: str,
) -> tuple[DatasetLike, ModelState, ModelState, History] | None:
    """The dataset (``record`` loaded, or fresh if it is rejected), its start, truth and history."""
    model = machine._model()
    dataset = machine._dataset(plan, rank, None)
    if dataset is None:
        return None
    if record is None:
        return dataset, model.initial(), model.initial(), model.empty_history()
    loaded = machine._load(dataset, record, via_json, f"{where} from {record!r}")
    if loaded is not None:
        return dataset, loaded, record.truth, record.history
    dataset = machine._dataset(plan, rank, None)
    if dataset is None:
        return None
    return dataset, model.initial(), model.initial(), model.empty_history()


def _spec_run(
    machine: DifferentialMachine, plan: SessionPlan, rank: int, batch_size: int, start: ModelState
) -> LoaderRun | SpecError:
    model = machine._model()
    topology = Topology(plan.world_size, rank, machine.loader_workers)
    corpus = model.corpus if model.packing is not None else None
    return attempt(
        lambda: run_loader(model.config, model.perm, model.faults, topology, start, batch_size, corpus)
    )


def _start(
    machine: DifferentialMachine,
    dataset: DatasetLike,
    batch_size: int,
    expected: LoaderRun | SpecError,
    where: str,
) -> Iterator[object] | None:
    """``iter(StreamingDataLoader(dataset, ...))``, which must fail exactly when the spec's run does."""
    nw = machine.loader_workers
    kwargs: dict[str, object] = {"batch_size": batch_size, "num_workers": nw}
    if nw:
        kwargs["multiprocessing_context"] = "spawn"
    order = "CanonicalOrderProp" if machine._model().packing is None else "PackingBudgetProp"
    try:
        iterator = iter(machine.implementation.loader(dataset, **kwargs))
    except Exception as error:
        if not isinstance(expected, SpecError) or not isinstance(error, builtin_error(expected)):
            machine._fail(order, f"{where}: iter() raised {describe(error)}; spec: {expected}")
        return None
    if isinstance(expected, SpecError):
        machine._fail(order, f"{where}: iter() succeeded; the spec raises {expected}")
        return None
    return iterator


def _receive(
    machine: DifferentialMachine,
    iterator: Iterator[object],
    expected: LoaderRun,
    received: list[list[Item]],
    batches: int,
    where: str,
) -> bool:
    """Take up to ``batches`` batches, comparing each with the spec; return whether one failed."""
    model = machine._model()
    flat = [item for d in expected.deliveries for item in d.items]
    offset = 0
    for j in range(batches):
        try:
            batch = next(iterator)
        except StopIteration:
            judges.judge_loader_stop(machine.verdicts, model, expected, j, where)
            return False
        except Exception as error:
            judges.judge_loader_error(machine.verdicts, model, expected, j, error, where)
            return True
        items = decode_batch(model, batch, flat, offset)
        if not judges.judge_batch(machine.verdicts, model, items, expected, j, where):
            return True
        assert not isinstance(items, str)
        received.append(items)
        offset += len(items)
    return False


def _check_history(machine: DifferentialMachine, history: History, items: Sequence[Item], where: str) -> None:
    lineage = [list(h) for h in history]
    for item in items:
        if 0 <= item.split < len(lineage):
            lineage[item.split].append(item)
    judges.judge_lineage(machine.verdicts, machine._model(), lineage, False, where)


def _committed_state(
    machine: DifferentialMachine,
    dataset: DatasetLike,
    plan: SessionPlan,
    rank: int,
    expected: LoaderRun,
    n: int,
    failed: bool,
    where: str,
) -> tuple[Mapping[str, object], ModelState] | None:
    """The loader's checkpoint after ``n`` received batches, and the spec's committed state there."""
    model = machine._model()
    gate = CheckpointGate()
    if failed:
        gate = gate_after_failure(gate, "a batch failed")
    committed = expected.state_after(min(n, len(expected.deliveries)))
    rank_owned = rank_splits(model.config.num_splits, plan.world_size, rank)
    state = machine._state_dict(
        dataset, gate, committed, rank_owned, "ConsumerCommitProp", f"{where} after {n} batches"
    )
    return None if state is None else (state, committed)


def _record(
    machine: DifferentialMachine,
    committed: tuple[Mapping[str, object], ModelState],
    plan: SessionPlan,
    rank: int,
    start: ModelState,
    truth: ModelState,
    true_run: LoaderRun | SpecError,
    history: History,
    received: list[list[Item]],
    where: str,
) -> Recorded:
    """Judge the committed checkpoint (``ConsumerCommitProp``); record it with its truth and history."""
    model = machine._model()
    state, expected = committed
    n = len(received)
    rank_owned = rank_splits(model.config.num_splits, plan.world_size, rank)
    parsed = judges.judge_state(
        machine.verdicts,
        model,
        state,
        expected,
        start,
        rank_owned,
        "ConsumerCommitProp",
        f"{where} after {n}",
    )
    if isinstance(parsed, RowState) and isinstance(start, RowState):
        deliveries = tuple(Delivery(0, j, tuple(batch), parsed) for j, batch in enumerate(received))
        observed = LoaderRun(start, deliveries, None)
        machine.verdicts.guard(lambda: inv.ConsumerCommitProp(model.perm, model.faults, observed, n))
    new_history = list(history)
    for item in (item for batch in received for item in batch):
        if 0 <= item.split < len(new_history):
            new_history[item.split] = (*new_history[item.split], item)
    truth_after = (
        truth if isinstance(true_run, SpecError) else true_run.state_after(min(n, len(true_run.deliveries)))
    )
    label = f"loader rank {rank} after {n} batches epoch {model.number}"
    return Recorded(label, model.number, state, truth_after, tuple(new_history))
