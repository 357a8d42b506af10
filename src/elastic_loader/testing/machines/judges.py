"""The judges: what the spec says must hold, compared with what the implementation did.

Every discrepancy is recorded under the name of the invariant it breaks, in a
:class:`Verdicts` (the first text per name is kept). The machines call the
judges after each operation; :data:`JUDGES` is the table of every checked
invariant: its statement and, for the invariants judged on a whole lineage,
the check that runs after every step. An invariant method of the machine
(``state.HonestProgressInv()``) runs its entry of the table and then raises the
recorded violation, if that name is enforced.

Rules of this module:

* A judge never calls the implementation and never changes the machine's
  state; it reads spec values and what the implementation produced, and
  records into the :class:`Verdicts` it is given, in a fixed order (so the
  first text of a name does not depend on anything but the program).
* The spec is called only on inputs it accepts: a spec predicate runs through
  :meth:`Verdicts.guard`, where a ``SpecError`` means the machine fed the spec
  bad inputs (an ``AssertionError``, a bug of the suite), and an
  :class:`~elastic_loader.spec.invariants.InvariantViolation` is recorded.
* :data:`CHECKED` is :data:`~elastic_loader.spec.invariants.INVARIANT_NAMES`
  without the names of :data:`NOT_CHECKED`, each excluded with its reason; the
  single-table machines judge :data:`DIFFERENTIAL_CHECKED` (the table :data:`JUDGES`),
  the mixture machine :data:`MIXTURE_CHECKED`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from ...spec import (
    Block,
    Exhausted,
    PackedRun,
    Raised,
    RowRun,
    RowState,
    SpecError,
    Yielded,
    invariants as inv,
)
from ...spec.computed import ComputedPermutation, computed_positions
from ...spec.loader import LoaderRun, global_steps
from ...spec.local import LocalPermutation
from ..tables import InjectedFault, PositionSource, fault_row
from .model import EpochModel, Item, Run, builtin_error, describe, items_of
from .sessions import Session, Slot, lineage

NOT_CHECKED: Mapping[str, str] = {
    "SplitSizeInv": "a property of the storage backend's permutation, which implementation and spec share",
    "TableVersionPinInv": "the machines' tables never change inside an example, so a resume cannot read "
    "another version than its checkpoint's (the pin a checkpoint records is compared with the spec's, "
    "under CheckpointRoundTripInv); tests/pipeline/checkpoint/test_pipe_protocols.py appends, deletes "
    "and updates rows after a save and cleans old versions up",
}
"""The invariants the machines cannot observe, each with the reason."""

CHECKED: tuple[str, ...] = tuple(name for name in inv.INVARIANT_NAMES if name not in NOT_CHECKED)
"""The invariants the machines check, in ``INVARIANT_NAMES`` order."""

MIXTURE_CHECKED: tuple[str, ...] = (
    "MixtureProportionInv",
    "MixtureLockstepInv",
    "MixtureElasticDeterminismProp",
    "MixtureExactlyOnceProp",
)
"""The invariants of mixtures: only the mixture machine (:mod:`.mixture`) checks them, and only on an
implementation that has mixtures (:func:`~elastic_loader.testing.adapters.mixture_api`)."""

DIFFERENTIAL_CHECKED: tuple[str, ...] = tuple(name for name in CHECKED if name not in MIXTURE_CHECKED)
"""The invariants the single-table differential machines check (the names of :data:`JUDGES`)."""


class Verdicts:
    """The violations found in one example: the first text per invariant name.

    ``observed``, when given, also collects the first text of every name across
    all the examples of a run (:func:`~.runner.check_invariants` reads it).
    """

    def __init__(self, observed: dict[str, str] | None = None) -> None:
        self.found: dict[str, str] = {}
        self.observed = observed

    def fail(self, name: str, detail: str) -> None:
        """Record a violation of ``name`` (a name of :data:`CHECKED`)."""
        assert name in CHECKED, name
        self.found.setdefault(name, detail)
        if self.observed is not None:
            self.observed.setdefault(name, detail)

    def guard(self, check: Callable[[], None]) -> None:
        """Run a spec predicate; record the violation it raises."""
        try:
            check()
        except inv.InvariantViolation as violation:
            self.fail(violation.name, violation.detail)
        except SpecError as error:
            raise AssertionError(f"the spec rejected its own inputs: {error}") from error

    def judge(self, name: str, check: Callable[[], None], where: str = "") -> None:
        """Run a spec predicate on the implementation's data; record its violation, and record a
        violation of ``name`` when the spec cannot even read that data."""
        prefix = f"{where}: " if where else ""
        try:
            check()
        except inv.InvariantViolation as violation:
            self.fail(violation.name, prefix + violation.detail)
        except SpecError as error:
            self.fail(name, f"{prefix}the spec cannot judge what the implementation gave: {error}")

    def report(self, name: str, enforced: frozenset[str]) -> None:
        """Raise the recorded violation of ``name`` if it is enforced."""
        if name in self.found and name in enforced:
            raise inv.InvariantViolation(name, self.found[name])


# ---------------------------------------------------------------- items of a slot


def judge_item(
    verdicts: Verdicts,
    owned: Sequence[int],
    k: int,
    item: Item,
    resumed: bool,
    expected: Run | SpecError,
    where: str,
) -> None:
    """Compare the ``k``-th item of an iterator over ``owned`` with the spec run ``expected``."""
    if isinstance(item, Yielded):
        _judge_row(verdicts, owned, k, item, resumed, expected, where)
        return
    if isinstance(expected, SpecError):
        name = "ResumeEquivalenceProp" if resumed else "PackingConservationInv"
        verdicts.fail(name, f"{where}: yielded a block, the spec fails first: {expected}")
        return
    assert isinstance(expected, PackedRun)
    if k >= len(expected.blocks):
        verdicts.fail(
            "PackingBudgetProp", f"{where}: block #{k} after the spec's {len(expected.blocks)} blocks"
        )
        return
    want = expected.blocks[k]
    if len(item.input_ids) != len(want.input_ids):
        verdicts.fail("PackingBudgetProp", f"{where}: block #{k} has {len(item.input_ids)} tokens")
    if resumed and (item.input_ids, item.doc_ids) != (want.input_ids, want.doc_ids):
        verdicts.fail("ResumeEquivalenceProp", f"{where}: block #{k} {item} != spec {want}")
    elif item.input_ids != want.input_ids:
        verdicts.fail(
            "PackingConservationInv", f"{where}: block #{k} input_ids {item.input_ids} != {want.input_ids}"
        )
    elif item.doc_ids != want.doc_ids:
        verdicts.fail("DocIdsInv", f"{where}: block #{k} doc_ids {item.doc_ids} != {want.doc_ids}")


def _judge_row(
    verdicts: Verdicts,
    owned: Sequence[int],
    k: int,
    item: Yielded,
    resumed: bool,
    expected: Run | SpecError,
    where: str,
) -> None:
    if item.split not in owned:
        verdicts.fail("PartitionInv", f"{where}: row {item} of split {item.split}, owned {owned}")
    name = "ResumeEquivalenceProp" if resumed else "CanonicalOrderProp"
    if not isinstance(expected, RowRun):
        verdicts.fail(name, f"{where}: yielded {item}, the spec fails first: {expected}")
    elif k >= len(expected.rows):
        verdicts.fail(name, f"{where}: row #{k} {item} after the spec's last row ({expected.end})")
    elif expected.rows[k] != item:
        verdicts.fail(name, f"{where}: row #{k} is {item}, spec {expected.rows[k]}")


def judge_end(verdicts: Verdicts, model: EpochModel, slot: Slot, error: Exception | None, where: str) -> str:
    """The slot's iterator stopped (``error=None``) or raised ``error``; return how it finished."""
    k = len(slot.delivered)
    expected = slot.expected
    order = "PackingBudgetProp" if model.packing is not None else "CanonicalOrderProp"
    if isinstance(expected, SpecError):
        if error is None or not isinstance(error, builtin_error(expected)):
            got = "stopped" if error is None else f"raised {describe(error)}"
            verdicts.fail(order, f"{where}: {got} after {k} items; the spec raises {expected}")
        return "error"
    if error is None:
        count, end = len(items_of(expected)), expected.end
        if isinstance(end, Raised):
            verdicts.fail(
                "RaisePositionProp", f"{where}: stopped after {k} items; spec raises at {end} after {count}"
            )
        elif k != count:
            verdicts.fail(order, f"{where}: stopped after {k} items; the spec yields {count}")
        judge_finished_run(verdicts, model, slot)
        return "exhausted"
    if not _is_fault(model, error):
        verdicts.fail(
            order, f"{where}: raised {describe(error)} after {k} items; the spec ends with {expected.end}"
        )
        return "error"
    _judge_raise(verdicts, model, k, expected, error, where)
    return "raised"


def _is_fault(model: EpochModel, error: Exception) -> bool:
    """An injected transform fault (a packing fault is a null token list: ``ValueError``)."""
    return isinstance(error, InjectedFault) or (model.packing is not None and isinstance(error, ValueError))


def _judge_raise(
    verdicts: Verdicts, model: EpochModel, k: int, expected: Run, error: Exception, where: str
) -> None:
    """An iterator raised an injected fault after ``k`` items: where the spec raises, at that row."""
    count, end = len(items_of(expected)), expected.end
    row = fault_row(error)
    if not isinstance(end, Raised):
        verdicts.fail("RaisePositionProp", f"{where}: raised {describe(error)} after {k} items; spec: {end}")
    elif k != count or (model.packing is None and row != end.row_id):
        verdicts.fail(
            "RaisePositionProp",
            f"{where}: raised at id {row} after {k} items; the spec raises at id {end.row_id} "
            f"(split {end.split}, position {end.position}) after {count} items",
        )


def observed_rows(slot: Slot) -> RowRun | None:
    """The rows a row-mode slot delivered as a spec run from its start (None if they cannot be one)."""
    if not isinstance(slot.start, RowState):
        return None
    samples, positions = list(slot.start.samples), list(slot.start.positions)
    rows: list[Yielded] = []
    states: list[RowState] = []
    for item in slot.delivered:
        if not isinstance(item, Yielded):
            return None
        samples[item.split] += 1
        positions[item.split] = item.position + 1
        if samples[item.split] > positions[item.split]:
            return None
        rows.append(item)
        states.append(RowState(tuple(samples), tuple(positions)))
    return RowRun(slot.start, tuple(rows), tuple(states), Exhausted())


def judge_catch_up(verdicts: Verdicts, slot: Slot) -> None:
    """The rows delivered so far catch lagging splits up first (``CatchUpInv``)."""
    observed = observed_rows(slot)
    if observed is not None:
        verdicts.guard(lambda: inv.CatchUpInv(observed.start, observed, slot.owned))


def judge_finished_run(verdicts: Verdicts, model: EpochModel, slot: Slot) -> None:
    """An exhausted row iterator: the whole run is known, so check CanonicalOrderProp on it."""
    observed = observed_rows(slot)
    if observed is not None and not isinstance(slot.expected, SpecError):
        verdicts.guard(lambda: inv.CanonicalOrderProp(model.perm, model.faults, slot.owned, observed))


# ---------------------------------------------------------------- checkpoints


def judge_state_dict(
    verdicts: Verdicts, refusal: object, answer: Mapping[str, object] | Exception, name: str, where: str
) -> bool:
    """``state_dict()`` answered (a state, or an error): it may refuse only with a ``RuntimeError``, and
    only where the spec's checkpoint gate refuses (``refusal`` is the spec's error, if any); return
    whether the answer is a checkpoint to judge."""
    if isinstance(answer, Exception):
        if not isinstance(refusal, SpecError) or not isinstance(answer, RuntimeError):
            verdicts.fail(name, f"{where}: state_dict() raised {describe(answer)}; spec: {refusal}")
        return False
    if isinstance(refusal, SpecError):
        verdicts.fail(name, f"{where}: state_dict() answered {answer!r}; the spec refuses: {refusal}")
        return False
    return True


# ---------------------------------------------------------------- StreamingDataLoader batches


def judge_loader_stop(verdicts: Verdicts, model: EpochModel, expected: LoaderRun, j: int, where: str) -> None:
    """The loader stopped after ``j`` batches: the spec delivers exactly those and ends cleanly."""
    if j < len(expected.deliveries) or expected.error is not None:
        verdicts.fail(
            "RaisePositionProp" if expected.error is not None else _order(model),
            f"{where}: stopped after {j} batches; spec delivers {len(expected.deliveries)} "
            f"then {expected.error}",
        )


def judge_loader_error(
    verdicts: Verdicts, model: EpochModel, expected: LoaderRun, j: int, error: Exception, where: str
) -> None:
    """Batch ``j`` raised ``error``: only an injected fault, exactly where the spec raises."""
    fault = _is_fault(model, error)
    if not (fault and expected.error is not None and j == len(expected.deliveries)):
        verdicts.fail(
            "RaisePositionProp" if fault else _order(model),
            f"{where}: batch {j} raised {describe(error)}; spec delivers "
            f"{len(expected.deliveries)} batches then {expected.error}",
        )


def judge_batch(
    verdicts: Verdicts, model: EpochModel, items: list[Item] | str, expected: LoaderRun, j: int, where: str
) -> bool:
    """Batch ``j`` as read (or why it cannot be read) against the spec's; return whether to go on."""
    packed = model.packing is not None
    if isinstance(items, str):
        verdicts.fail("CanonicalOrderProp" if not packed else "PackingConservationInv", f"{where}: {items}")
        return False
    if j >= len(expected.deliveries):
        verdicts.fail(_order(model), f"{where}: batch {j} {items} after the spec's last batch")
        return False
    want = list(expected.deliveries[j].items)
    if items == want:
        return True
    if not packed:
        verdicts.fail("CanonicalOrderProp", f"{where}: batch {j} is {items}, spec {want}")
    elif [b.input_ids for b in items if isinstance(b, Block)] != [
        b.input_ids for b in want if isinstance(b, Block)
    ]:
        verdicts.fail("PackingConservationInv", f"{where}: batch {j} blocks {items} != spec {want}")
    else:
        verdicts.fail("DocIdsInv", f"{where}: batch {j} doc_ids differ: {items} != spec {want}")
    return True


def _order(model: EpochModel) -> str:
    """The invariant a wrong number of items breaks: the block budget, or the canonical row order."""
    return "PackingBudgetProp" if model.packing is not None else "CanonicalOrderProp"


# ---------------------------------------------------------------- lineages


def judge_lineage(
    verdicts: Verdicts, model: EpochModel, splits: Sequence[Sequence[Item]], finished: bool, where: str
) -> None:
    """What a trainer received per split since the epoch started (``finished``: the epoch is over)."""
    if model.packing is None:
        rows = [item for split in splits for item in split if isinstance(item, Yielded)]
        verdicts.guard(lambda: inv.ExactlyOnceProp(model.perm, model.faults, rows, finished))
        judge_steps(verdicts, model, splits, where)
        return
    for s, blocks in enumerate(splits):
        _judge_split_blocks(verdicts, model, s, [b for b in blocks if isinstance(b, Block)], finished, where)


def _judge_split_blocks(
    verdicts: Verdicts, model: EpochModel, s: int, got: Sequence[Block], finished: bool, where: str
) -> None:
    """The blocks split ``s`` delivered: a prefix of its token stream and of its topology-free blocks."""
    packing = model.packing
    assert packing is not None
    expected = model.per_split[s]
    delivered = [t for b in got for t in b.input_ids[: b.real]]
    stream = [t for b in expected if isinstance(b, Block) for t in b.input_ids[: b.real]]
    if delivered != stream[: len(delivered)]:
        verdicts.fail(
            "PackingConservationInv",
            f"{where}: split {s} delivered tokens {delivered} are not a prefix of its stream {stream}",
        )
    if any(t != packing.pad_id for b in got for t in b.input_ids[b.real :]):
        verdicts.fail("PackingConservationInv", f"{where}: split {s} padding is not pad_id")
    if list(expected[: len(got)]) != list(got):
        verdicts.fail(
            "ElasticDeterminismProp",
            f"{where}: split {s} blocks {list(got)} differ from its topology-free blocks {list(expected)}",
        )
    budget = packing.blocks_per_split(model.config.num_splits)
    if len(got) > budget or (finished and len(got) != budget):
        verdicts.fail("PackingBudgetProp", f"{where}: split {s} emitted {len(got)} blocks, budget {budget}")


def judge_steps(verdicts: Verdicts, model: EpochModel, splits: Sequence[Sequence[Item]], where: str) -> None:
    """Global step ``g`` (one cycle of every split) holds the same rows whatever the topology was."""
    expected = global_steps(model.perm, model.faults, 1)
    complete = min(len(split) for split in splits)
    for g in range(complete):
        got = frozenset(
            (y.split, y.position) for y in (split[g] for split in splits) if isinstance(y, Yielded)
        )
        if g >= len(expected) or got != expected[g]:
            want = expected[g] if g < len(expected) else "no step"
            verdicts.fail(
                "ElasticDeterminismProp", f"{where}: global step {g} holds {sorted(got)}, spec {want}"
            )
            return


def judge_chain(
    verdicts: Verdicts, model: EpochModel, splits: Sequence[Sequence[Item]], finished: bool, where: str
) -> None:
    """``ProtocolChainProp`` on a lineage that went through save protocols: every split's rows
    (blocks) once, in order, from the start of the epoch; all of them once it is finished."""
    delivered = [item for split in splits for item in split]
    corpus = model.corpus if model.packing is not None else None
    verdicts.judge(
        "ProtocolChainProp",
        lambda: inv.ProtocolChainProp(model.perm, model.faults, corpus, model.packing, delivered, finished),
        where,
    )


# ---------------------------------------------------------------- the table
# Every lineage check runs only while the session's lineage describes the job (Session.lineage).


def _packed_lineage(verdicts: Verdicts, model: EpochModel, session: Session) -> None:
    if model.packing is not None and session.lineage:
        splits, finished = lineage(session)
        judge_lineage(verdicts, model, splits, finished, f"lineage of {session.origin}")


def _row_steps(verdicts: Verdicts, model: EpochModel, session: Session) -> None:
    if model.packing is None and session.lineage:
        splits, _ = lineage(session)
        judge_steps(verdicts, model, splits, f"lineage of {session.origin}")


def _protocol_chain(verdicts: Verdicts, model: EpochModel, session: Session) -> None:
    if session.lineage and session.chain >= 1:
        splits, finished = lineage(session)
        judge_chain(verdicts, model, splits, finished, f"lineage of {session.origin}")


def _rows_once(verdicts: Verdicts, model: EpochModel, session: Session) -> None:
    if model.packing is None and session.lineage:
        splits, finished = lineage(session)
        rows = [item for split in splits for item in split if isinstance(item, Yielded)]
        verdicts.guard(lambda: inv.ExactlyOnceProp(model.perm, model.faults, rows, finished))


@functools.cache
def _source_violations(source: PositionSource) -> tuple[tuple[str, str], ...]:
    """The spec's predicates of a computed or local permutation over the whole (small) table,
    as (name, detail) of each violation; cached: a configuration's permutation never changes."""
    checks: list[Callable[[], None]]
    if isinstance(source, ComputedPermutation):
        checks = [lambda: inv.ComputedBijectionInv(source)]
    else:
        checks = [lambda: inv.LocalBijectionInv(source), lambda: inv.LocalLocalityInv(source)]
        if source.clump == source.window == 1:
            n, s_, seed, epoch = source.num_rows, source.num_splits, source.shuffle_seed, source.epoch
            checks.append(lambda: inv.LocalDegeneracyInv(n, s_, seed, epoch))
    found = Verdicts()
    for check in checks:
        found.guard(check)
    return tuple(found.found.items())


def _read_positions(verdicts: Verdicts, model: EpochModel, session: Session) -> None:
    """With a computed or local permutation, the spec's own predicates hold on it, and the rows each
    split delivered along the lineage are, in order, a prefix of what the spec's permutation reads
    there (so the implementation reads that permutation, whose runs ``LocalLocalityInv`` bounds);
    with ``clump = window = 1`` they are also the computed permutation's (the machines' ``id`` is
    the storage position: tables are written in id order)."""
    source = model.source
    if source is None:
        return
    for name, detail in _source_violations(source):
        verdicts.fail(name, detail)
    if model.packing is not None or not session.lineage:
        return
    local = source if isinstance(source, LocalPermutation) else None
    name = "ComputedBijectionInv" if local is None else "LocalBijectionInv"
    twin = None
    if local is not None and local.clump == local.window == 1:
        twin = ComputedPermutation(local.num_rows, local.num_splits, local.shuffle_seed, local.epoch)
    splits, _ = lineage(session)
    for s, items in enumerate(splits):
        got = [item.row_id for item in items if isinstance(item, Yielded)]
        spec_split = model.perm[s]
        positions = inv.yieldable(spec_split, model.faults)[: len(got)]
        if got != [spec_split[p] for p in positions]:
            verdicts.fail(name, f"split {s} delivered ids {got}, the spec's permutation reads {spec_split}")
            continue
        if twin is not None:
            reads = [computed_positions(twin, s, p, 1)[0] for p in positions]
            if got != reads:
                verdicts.fail(
                    "LocalDegeneracyInv", f"split {s} delivered {got}, the computed permutation {reads}"
                )


LineageCheck = Callable[[Verdicts, EpochModel, Session], None]
"""A check of the current session's whole lineage, run after every step."""


@dataclass(frozen=True)
class Judge:
    """How the machines judge one invariant."""

    statement: str
    """What the machines check, in their terms (the docstring of the invariant method)."""
    after_step: LineageCheck | None = None
    """Run after every step on the current lineage, before the violation is reported."""


JUDGES: Mapping[str, Judge] = {
    "PartitionInv": Judge("Every row comes from a split its (rank, worker) owns."),
    "ComputedBijectionInv": Judge(
        "With permutation='computed', the spec's bijection holds over the table, and every delivered row "
        "is the one it reads at that (split, position).",
        _read_positions,
    ),
    "ProgressBoundsInv": Judge("Checkpoints keep ``0 <= samples <= positions <= split length``."),
    "SkipAccountingInv": Judge("``positions - samples`` counts the skipped rows before ``positions``."),
    "HonestProgressInv": Judge(
        "A checkpoint keeps the loaded value of every split it neither owns nor infers (a sibling "
        "worker's, an unknown split, a packed projection's base)."
    ),
    "CatchUpInv": Judge("Lagging splits catch up first, in (count, split) order."),
    "MergeLatticeInv": Judge(
        "``merge_state_dicts`` is the spec's merge (commutative, associative, idempotent)."
    ),
    "CheckpointRoundTripInv": Judge(
        "Checkpoints have the spec's keys, canonical form and table pin; a load refuses what does not "
        "fit the dataset; right after a load, ``state_dict()`` is the spec's."
    ),
    "PackingConservationInv": Judge(
        "Delivered tokens of a split are exactly its documents, each followed by EOS, in order.",
        _packed_lineage,
    ),
    "DocIdsInv": Judge("``doc_ids`` number the documents inside each block."),
    "AutoBudgetInv": Judge('``blocks_per_epoch="auto"`` resolves to the spec\'s estimate.'),
    "CanonicalOrderProp": Judge("Items come in the spec's order and the run ends where the spec's does."),
    "ElasticDeterminismProp": Judge(
        "Each global step (rows) or each split's blocks (packing) are the same whatever the topology.",
        _row_steps,
    ),
    "ResumeEquivalenceProp": Judge("A checkpoint is exact, and resuming it continues the uninterrupted run."),
    "ExactlyOnceProp": Judge(
        "Across checkpoints and resumes no row is delivered twice or skipped over.", _rows_once
    ),
    "MergeExactProp": Judge("Merging every slot's latest checkpoint gives the job's true progress."),
    "ConsumerCommitProp": Judge(
        "``StreamingDataLoader`` checkpoints count exactly the batches the trainer received."
    ),
    "PackingBudgetProp": Judge(
        "Every split emits exactly ``blocks_per_epoch / S`` blocks of ``pack_sequences`` tokens."
    ),
    "RaisePositionProp": Judge("A raising row surfaces after every row before its cycle, never earlier."),
    "LockstepInferenceInv": Judge(
        "A checkpoint infers every other split (and the cursor) as the spec does; in a lockstep session "
        "every rank's checkpoint resumes every split it knows as its owner's does."
    ),
    "MergeReportedInv": Judge(
        "A merge takes every split from the checkpoint of its owner; leaving out a rank raises."
    ),
    "PartialStateRefusedInv": Judge(
        "A rank refuses a checkpoint that does not know one of its splits, and a one-rank packed "
        "checkpoint without the provenance key."
    ),
    "ReachableLoadInv": Judge(
        "Every checkpoint the implementation writes loads back (its digest is the spec's); an edited "
        "progress value is refused."
    ),
    "ProtocolChainProp": Judge(
        "Along resumes by any save protocol, every split's rows (blocks) reach the trainer once, in order.",
        _protocol_chain,
    ),
    "SameTopologyResumeProp": Judge(
        "``state_dict()`` answers after any batch; a loader session resumed on its own shape continues "
        "every rank's batch sequence."
    ),
    "LocalBijectionInv": Judge(
        "With a local permutation, the spec's clumped windows are a bijection, and every delivered row is "
        "the one it reads at that (split, position).",
        _read_positions,
    ),
    "LocalLocalityInv": Judge(
        "The local permutation the rows follow reads each window as at most ``ceil(W/C) + 2`` merged runs "
        "of contiguous positions covering it.",
        _read_positions,
    ),
    "LocalDegeneracyInv": Judge(
        "With ``clump = window = 1`` the local permutation delivers the computed permutation's rows.",
        _read_positions,
    ),
}
"""Every invariant the single-table machines check, in :data:`DIFFERENTIAL_CHECKED` order."""

assert tuple(JUDGES) == DIFFERENTIAL_CHECKED, (
    "JUDGES must list exactly the single-table machines' invariants, in INVARIANT_NAMES order"
)
