"""The machines' ``StreamingDataLoader`` sessions: every rank of a topology, in lockstep.

A session builds one dataset per rank of the loader's topology (each loading
what the save protocol gives it from a checkpoint, or fresh ones when a rank
rightly refuses it), asks the spec what the job session delivers
(:func:`~elastic_loader.spec.protocols.run_session`, every rank taking the same
number of batches: :func:`~elastic_loader.spec.protocols.lockstep_batches`)
from the checkpoints the implementation was given, and from the conforming
chain's starts, runs every rank's loader for that many batches, and judges the
batches and every rank's checkpoint after them (``ConsumerCommitProp`` for a
rank's own splits, ``LockstepInferenceInv`` for what it infers). A session
resumed on the shape of the loader session that wrote its checkpoint must
continue that session's batch sequence exactly (``SameTopologyResumeProp``).

Rules of this module: functions of the machine they run for (its dataset,
load and ``state_dict`` helpers); a rank's loader stays alive until its
checkpoint is taken, as in a training loop; judging is in :mod:`.judges` and
:mod:`.checkpoints`.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from ...spec import CheckpointGate, RowState, SpecError, gate_after_failure, invariants as inv, rank_splits
from ...spec.loader import Delivery, LoaderRun
from ...spec.protocols import RankResult, Shape, lockstep_batches, run_session
from ...spec.saved import Saved
from ..adapters import DatasetLike
from . import checkpoints, judges, protocols
from .model import History, Item, ModelState, assemble, attempt, describe, note
from .observe import decode_batch
from .plans import LoaderPlan, SessionPlan
from .sessions import LoaderMemo, Recorded, close_iterator

if TYPE_CHECKING:
    from .differential import DifferentialMachine


@dataclass
class _Opened:
    """A loader session's ranks, ready to run."""

    plan: SessionPlan
    shape: Shape
    datasets: list[DatasetLike]
    starts: list[Saved]
    """The spec's reading of what every rank loaded."""
    true: list[Saved]
    """The conforming chain's start of every rank."""
    truth: ModelState
    history: History
    lineage: bool
    chain: int
    memo: LoaderMemo | None
    """The loader session whose checkpoints this one resumes on their own shape, if any."""
    resumed: bool


@dataclass
class _Ran:
    """What every rank's loader delivered and checkpointed."""

    received: list[list[list[Item]]]
    states: list[Mapping[str, object]]


def run(
    machine: DifferentialMachine, record: Recorded | None, plan: LoaderPlan, via_json: bool
) -> Recorded | None:
    """One lockstep loader session of every rank: judge its batches and checkpoints; record it."""
    opened = _open(machine, record, plan, via_json)
    if opened is None:
        return None
    model, shape = machine.spec_model(), opened.shape
    where = f"StreamingDataLoader session (world_size={shape.world_size}, batch_size={shape.batch_size})"
    corpus = model.corpus if model.packing is not None else None
    W = shape.world_size

    def spec_session(starts: Sequence[Saved]) -> tuple[RankResult, ...]:
        n = lockstep_batches(model.config, model.perm, model.faults, corpus, starts, shape, plan.batches)
        return run_session(
            model.config,
            model.perm,
            model.faults,
            corpus,
            starts,
            shape,
            [n] * W,
            model.split_len,
            model.skipping,
        )

    expected = attempt(lambda: spec_session(opened.starts))
    if isinstance(expected, SpecError):
        machine.fail("ReachableLoadInv", f"{where}: the checkpoints given cannot be resumed: {expected}")
        return None
    true = attempt(lambda: spec_session(opened.true)) if opened.lineage else expected
    lineage = opened.lineage and not isinstance(true, SpecError)
    truly = expected if isinstance(true, SpecError) else true
    origin = "the start" if record is None else repr(record)
    note(f"{where} from {origin}: every rank takes {expected[0].taken} batches")
    ran = _run_ranks(machine, opened, expected, where)
    if ran is None:
        return None
    parsed = _judge_ranks(machine, opened, expected, ran, where)
    # LockstepInferenceInv holds along chains of lockstep sessions: only when every rank started
    # where the job is (an own checkpoint of a session out of step infers wrongly by design).
    if parsed is not None and opened.lineage and all(model.agrees(s, opened.truth) for s in opened.starts):
        taken = [len(batches) for batches in ran.received]
        checkpoints.judge_lockstep(machine.verdicts, model, parsed, taken, where)
    _judge_continuation(machine, opened, truly, ran, lineage, where)
    history = _history(machine, opened, ran, lineage, where)
    return _record(machine, opened, plan, expected, truly, ran, history, lineage, where)


def _shape(
    machine: DifferentialMachine, record: Recorded | None, plan: LoaderPlan
) -> tuple[SessionPlan, Shape]:
    """The session plan and loader shape of a session (``same_shape``: the recorded session's)."""
    model, session = machine.spec_model(), machine.session
    assert session is not None
    nw = machine.loader_workers
    if plan.same_shape and record is not None and record.memo is not None:
        shape = record.memo.shape
        return machine.fit_plan(replace(session.plan, world_size=shape.world_size)), shape
    splan = session.plan
    if plan.world_size:
        splan = machine.fit_plan(replace(splan, world_size=plan.world_size))
    batch_size = plan.batch_size
    if plan.aligned:
        batch_size *= model.config.num_splits // splan.world_size // max(1, nw)
    return splan, Shape(splan.world_size, nw, batch_size)


def _open(
    machine: DifferentialMachine, record: Recorded | None, plan: LoaderPlan, via_json: bool
) -> _Opened | None:
    """Every rank's dataset, loaded by the plan's protocol (fresh ones when a rank refuses)."""
    model = machine.spec_model()
    splan, shape = _shape(machine, record, plan)
    if record is not None:
        given = protocols.starts(machine, record, plan.protocol)
        if given is not None and given.world_size is not None and given.world_size != shape.world_size:
            splan = machine.fit_plan(replace(splan, world_size=given.world_size))
            shape = replace(shape, world_size=splan.world_size)
        if given is not None:
            opened = _load_ranks(machine, record, given, splan, shape, via_json)
            if opened is not None:
                return opened
    datasets = [machine.new_dataset(splan, r, None) for r in range(shape.world_size)]
    if any(d is None for d in datasets):
        return None
    fresh = model.fresh()
    W = shape.world_size
    return _Opened(
        splan,
        shape,
        [d for d in datasets if d is not None],
        [fresh] * W,
        [fresh] * W,
        fresh.state,
        model.empty_history(),
        True,
        0,
        None,
        False,
    )


def _load_ranks(
    machine: DifferentialMachine,
    record: Recorded,
    given: protocols.Starts,
    splan: SessionPlan,
    shape: Shape,
    via_json: bool,
) -> _Opened | None:
    """Every rank loads its payload of ``given``; ``None`` when one refuses (judged in ``_load``)."""
    datasets: list[DatasetLike] = []
    starts: list[Saved] = []
    true: list[Saved] = []
    for r in range(shape.world_size):
        where = f"loader session rank {r} from {record!r} ({given.protocol})"
        dataset = machine.new_dataset(splan, r, None)
        if dataset is None:
            return None
        raw = given.payload(r)
        payload = json.loads(json.dumps(raw)) if via_json else copy.deepcopy(dict(raw))
        loaded = machine.load_checkpoint(dataset, payload, shape.world_size, r, record, where)
        if loaded is None:
            return None
        datasets.append(dataset)
        starts.append(loaded)
        true.append(protocols.true_start(machine, given, r, shape.world_size, record.truth))
    memo = record.memo if record.memo is not None and record.memo.shape == shape else None
    return _Opened(
        splan,
        shape,
        datasets,
        starts,
        true,
        record.truth,
        record.history,
        given.lineage,
        record.chain + 1,
        memo,
        True,
    )


def _run_ranks(
    machine: DifferentialMachine, opened: _Opened, expected: Sequence[RankResult], where: str
) -> _Ran | None:
    """Every rank's loader takes its lockstep batches and checkpoints (``None``: one cannot)."""
    ran = _Ran([], [])
    for r, result in enumerate(expected):
        at = f"{where} rank {r}"
        iterator = _start(machine, opened.datasets[r], opened.shape, result.run, at)
        if iterator is None:
            return None
        # The loader stays alive until the checkpoint is taken, as in a training loop.
        received: list[list[Item]] = []
        failed = _receive(machine, iterator, result.run, received, result.taken, at)
        gate = gate_after_failure(CheckpointGate(), "a batch failed") if failed else CheckpointGate()
        state = machine.take_state_dict(opened.datasets[r], gate, f"{at} after {len(received)} batches")
        close_iterator(iterator)
        del iterator
        if state is None:
            return None
        ran.received.append(received)
        ran.states.append(state)
    return ran


def _start(
    machine: DifferentialMachine, dataset: DatasetLike, shape: Shape, expected: LoaderRun, where: str
) -> Iterator[object] | None:
    """``iter(StreamingDataLoader(dataset, ...))``; a loader starts from any checkpoint (D23)."""
    nw = shape.num_workers
    kwargs: dict[str, object] = {"batch_size": shape.batch_size, "num_workers": nw}
    if nw:
        kwargs["multiprocessing_context"] = "spawn"
    try:
        return iter(machine.implementation.loader(dataset, **kwargs))
    except Exception as error:
        name = "SameTopologyResumeProp" if isinstance(error, RuntimeError) else "CanonicalOrderProp"
        machine.fail(
            name, f"{where}: iter() raised {describe(error)}; the spec delivers {expected.deliveries!r}"
        )
        return None


def _receive(
    machine: DifferentialMachine,
    iterator: Iterator[object],
    expected: LoaderRun,
    received: list[list[Item]],
    batches: int,
    where: str,
) -> bool:
    """Take up to ``batches`` batches, comparing each with the spec; return whether one failed."""
    model = machine.spec_model()
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


def _judge_ranks(
    machine: DifferentialMachine, opened: _Opened, expected: Sequence[RankResult], ran: _Ran, where: str
) -> list[Saved] | None:
    """Every rank's checkpoint against the spec's (``ConsumerCommitProp`` for its own splits); the
    spec's readings of them (``None`` if one cannot be read)."""
    model = machine.spec_model()
    out: list[Saved] = []
    for r, (result, state) in enumerate(zip(expected, ran.states)):
        at = f"{where} rank {r} after {len(ran.received[r])} batches"
        own = rank_splits(model.config.num_splits, opened.shape.world_size, r)
        parsed = checkpoints.judge_checkpoint(
            machine.verdicts,
            model,
            state,
            result.checkpoint,
            opened.starts[r],
            own,
            "ConsumerCommitProp",
            at,
            machine.writes_provenance(state, at),
        )
        if parsed is None:
            return None
        _consumer_commit(machine, opened.starts[r], parsed, own, ran.received[r])
        out.append(parsed)
    return out


def _consumer_commit(
    machine: DifferentialMachine, start: Saved, parsed: Saved, own: Sequence[int], received: list[list[Item]]
) -> None:
    """``ConsumerCommitProp`` on a rank's own splits: the batches it received account for them."""
    model = machine.spec_model()
    if not isinstance(parsed.state, RowState) or not isinstance(start.state, RowState):
        return
    begin = start.state
    mine = set(own)
    state = RowState(
        tuple(parsed.state.samples[s] if s in mine else begin.samples[s] for s in range(len(begin.samples))),
        tuple(
            parsed.state.positions[s] if s in mine else begin.positions[s] for s in range(len(begin.samples))
        ),
    )
    deliveries = tuple(Delivery(0, j, tuple(batch), state) for j, batch in enumerate(received))
    observed = LoaderRun(begin, deliveries, None)
    machine.verdicts.judge(
        "ConsumerCommitProp",
        lambda: inv.ConsumerCommitProp(model.perm, model.faults, observed, len(received)),
    )


def _judge_continuation(
    machine: DifferentialMachine,
    opened: _Opened,
    true: Sequence[RankResult],
    ran: _Ran,
    lineage: bool,
    where: str,
) -> None:
    """A resumed session continues the job: the loader session whose checkpoints it resumes on their
    own shape batch for batch (``SameTopologyResumeProp``), and the job's truth item for item."""
    memo = opened.memo
    for r, batches in enumerate(ran.received):
        if memo is not None:
            go_on = memo.runs[r].deliveries[memo.taken : memo.taken + len(batches)]
            want = [list(d.items) for d in go_on]
            if batches != want:
                machine.fail(
                    "SameTopologyResumeProp",
                    f"{where} rank {r}: resumed with batches {batches}; the session it resumes goes on "
                    f"with {want}",
                )
        if opened.resumed and lineage:
            items = [item for batch in batches for item in batch]
            truly = [item for d in true[r].run.deliveries for item in d.items][: len(items)]
            if items != truly:
                machine.fail(
                    "ResumeEquivalenceProp",
                    f"{where} rank {r}: received {items}, the uninterrupted job continues with {truly}",
                )


def _history(machine: DifferentialMachine, opened: _Opened, ran: _Ran, lineage: bool, where: str) -> History:
    """The lineage after this session; judged (exactly once, steps, packing; the chain of save
    protocols once it went through one) while it describes the job."""
    model = machine.spec_model()
    splits = [list(h) for h in opened.history]
    for batches in ran.received:
        for item in (item for batch in batches for item in batch):
            if 0 <= item.split < len(splits):
                splits[item.split].append(item)
    if lineage:
        judges.judge_lineage(machine.verdicts, model, splits, False, where)
        if opened.chain >= 1:
            judges.judge_chain(machine.verdicts, model, splits, False, where)
    return tuple(tuple(items) for items in splits)


def _record(
    machine: DifferentialMachine,
    opened: _Opened,
    plan: LoaderPlan,
    expected: Sequence[RankResult],
    true: Sequence[RankResult],
    ran: _Ran,
    history: History,
    lineage: bool,
    where: str,
) -> Recorded:
    """The session's record: the saver's checkpoint, every rank's beside it, the job's truth."""
    model = machine.spec_model()
    W = opened.shape.world_size
    saver = plan.rank % W
    n = expected[0].taken
    parts = []
    for r, result in enumerate(true):
        got = min(len(ran.received[r]), len(result.run.deliveries))
        parts.append((result.run.state_after(got), rank_splits(model.config.num_splits, W, r)))
    truth = assemble(parts)
    true_group = tuple(result.checkpoint for result in true)
    memo: LoaderMemo | None = None
    if all(len(batches) == n for batches in ran.received):  # a session that went as the spec says
        before = opened.memo
        if before is not None:
            memo = LoaderMemo(before.shape, before.runs, before.taken + n)
        else:
            memo = LoaderMemo(opened.shape, tuple(result.run for result in expected), n)
    label = f"loader W={W} batch_size={opened.shape.batch_size} rank {saver}@{n} epoch {model.number}"
    record = Recorded(
        label,
        model.number,
        ran.states[saver],
        truth,
        history,
        true_group[saver],
        lineage,
        lineage and model.agrees(true_group[saver], truth),
        tuple(ran.states),
        true_group,
        memo,
        opened.chain,
    )
    protocols.probe(machine, opened.plan, saver, record, where, opened.datasets[saver])
    return record
