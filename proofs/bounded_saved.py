"""Bounded checks of the save protocols: sessions, chains of sessions, merges, loads, table pins.

Rules: every check enumerates the *session universe* up to its bounds and calls the predicates of
``spec/invariants_saved.py`` by name; nothing here re-implements the model. Jobs: row jobs with
every ok / skip / raise fault set over ``S*m <= fault_rows`` rows, every ok / skip one over
``<= skip_rows`` rows and fault-free ones over ``<= clean_rows`` rows, each with skipping
transforms and (when no row is skipped) without; packed jobs over ``S*m <= packed_rows`` rows with
document lengths ``row % (doc_len + 1)``, every ok / skip / raise fault set over
``<= packed_fault_rows`` rows, every block length ``L <= block_len`` and per-split budget
``<= budget``. A *session* is every rank of a shape ``(W, nw, B)`` (every valid one, ``B <=
batch``) resuming from its start checkpoint and taking, in lockstep, every number of batches up to
``wanted`` (capped at what every rank delivers). A *chain* is a session from the epoch start, then
every protocol (``OWN`` on the same world size), every saver (``ONE_RANK``), every next shape
(``B <= batch_2``) and a second session of every length up to ``wanted_2`` -- for fault-free jobs
of ``<= chain_rows`` rows and faulty ones of ``<= chain_fault_rows`` rows.

Besides the predicates, the checks compare the delivery arithmetic of ``schedule.py`` with the
closed forms of ``encodings`` and with brute-force simulations (pair by pair, worker visit by
worker visit), and ``run_loader`` with a simulation of torch's loop and with ``simulate_pass``:
the link between the SMT lemmas of ``proofs/smt_saved.py`` and the code.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from elastic_loader.spec import (
    Faults,
    PackedState,
    PackingConfig,
    Raised,
    RowState,
    RunConfig,
    SpecValueError,
    Topology,
    initial_packed_state,
    initial_row_state,
    iterate_packed,
    iterate_rows,
    owned_splits,
    rank_splits,
    run_loader,
)
from elastic_loader.spec.inference import Pass, caps, simulate_pass
from elastic_loader.spec.invariants import (
    LockstepInferenceInv,
    MergeReportedInv,
    PartialStateRefusedInv,
    ProtocolChainProp,
    ReachableLoadInv,
    SameTopologyResumeProp,
    TableVersionPinInv,
)
from elastic_loader.spec.loader import Item, LoaderRun
from elastic_loader.spec.protocols import (
    Protocol,
    RankResult,
    Shape,
    lockstep_batches,
    next_starts,
    run_session,
)
from elastic_loader.spec.saved import (
    Saved,
    TablePin,
    exact,
    load_for_rank,
    merge_state_dicts,
    pinned_permutation,
    snapshot_saved,
)
from elastic_loader.spec.schedule import canonical_capacity, canonical_counts, next_worker, round_robin_turns
from elastic_loader.spec.topology import Permutation

from . import encodings as enc
from .framework import BoundedCheck, Bounds, Recorder
from .universes import EOS, PAD, corpus_of, describe_faults, fault_sets, permutation, topologies

Corpus = dict[int, tuple[int, ...]] | None


@dataclass(frozen=True)
class Job:
    """One epoch of a job: permutation, faults, documents (packed) and whether transforms may skip."""

    config: RunConfig
    perm: Permutation
    faults: Faults
    corpus: Corpus
    skipping: bool

    @property
    def split_len(self) -> int:
        return len(self.perm[0])

    def start(self, world_size: int, table: TablePin | None = None) -> list[Saved]:
        """Every rank's start checkpoint at the start of the epoch."""
        n = self.config.num_splits
        state = initial_row_state(n) if self.config.packing is None else initial_packed_state(n)
        return [exact(self.config, state, table)] * world_size

    def describe(self) -> str:
        """Replayable description."""
        text = f"splits={len(self.perm)}x{self.split_len} {describe_faults(self.faults)}"
        text += f" skipping={self.skipping}"
        if self.config.packing is not None and self.corpus is not None:
            lengths = [len(self.corpus[row]) for split in self.perm for row in split]
            text += f" doc_lengths={lengths} {self.config.packing}"
        return text


def _shapes_of(rows: int) -> Iterator[tuple[int, int]]:
    """Every ``(num_splits, split_len)`` with ``num_splits * split_len <= rows``."""
    for num_splits in range(1, rows + 1):
        for split_len in range(1, rows // num_splits + 1):
            yield num_splits, split_len


def _row_jobs(b: Bounds) -> Iterator[Job]:
    for num_splits, split_len in _shapes_of(max(b["fault_rows"], b["skip_rows"], b["clean_rows"])):
        perm = permutation(num_splits, split_len)
        rows = num_splits * split_len
        kinds = "osr" if rows <= b["fault_rows"] else "os" if rows <= b["skip_rows"] else "o"
        for faults in fault_sets([r for s in perm for r in s], kinds):
            for skipping in (True,) if faults.skipped else (False, True):
                yield Job(RunConfig(num_splits, 0, 0), perm, faults, None, skipping)


def _packed_jobs(b: Bounds) -> Iterator[Job]:
    for num_splits, split_len in _shapes_of(b["packed_rows"]):
        perm = permutation(num_splits, split_len)
        rows = [r for s in perm for r in s]
        corpus = corpus_of([r % (b["doc_len"] + 1) for r in rows])
        kinds = "osr" if len(rows) <= b["packed_fault_rows"] else "o"
        for faults in fault_sets(rows, kinds):
            for block_len, budget in itertools.product(
                range(1, b["block_len"] + 1), range(1, b["budget"] + 1)
            ):
                packing = PackingConfig(block_len, EOS, PAD, budget * num_splits)
                config = RunConfig(num_splits, 0, 0, None, packing)
                yield Job(config, perm, faults, corpus, bool(faults.skipped))


def jobs(rec: Recorder, b: Bounds) -> Iterator[Job]:
    """Row jobs, then packed jobs (none when ``packed_rows`` is 0)."""
    for job in rec.progress(list(itertools.chain(_row_jobs(b), _packed_jobs(b))), "jobs"):
        rec.at(job=job.describe())
        yield job


def shapes(num_splits: int, max_batch: int) -> Iterator[Shape]:
    """Every ``(W, nw)`` of ``num_splits`` splits with every batch size up to ``max_batch``."""
    for (world, workers), batch in itertools.product(topologies(num_splits), range(1, max_batch + 1)):
        yield Shape(world, workers, batch)


def lockstep(job: Job, starts: Sequence[Saved], shape: Shape, taken: int) -> tuple[RankResult, ...]:
    """A lockstep session: every rank takes ``taken`` batches (``taken`` <= what every rank delivers)."""
    return run_session(
        job.config,
        job.perm,
        job.faults,
        job.corpus,
        starts,
        shape,
        [taken] * shape.world_size,
        job.split_len,
        job.skipping,
    )


def batch_counts(job: Job, starts: Sequence[Saved], shape: Shape, wanted: int) -> range:
    """Every number of batches a lockstep session from ``starts`` can take, up to ``wanted``."""
    most = lockstep_batches(job.config, job.perm, job.faults, job.corpus, starts, shape, wanted)
    return range(most + 1)


def resumed(
    job: Job, results: Sequence[RankResult], protocol: Protocol, shape: Shape, saver: int
) -> list[Saved] | None:
    """The next session's starts, or ``None`` when a rank refuses the checkpoint (``progress_unknown``).

    Any other refusal is a model failure: a session's checkpoints must load."""
    try:
        return list(next_starts(job.config, results, protocol, shape, job.split_len, saver))
    except SpecValueError as exc:
        if exc.code != "progress_unknown" or not job.skipping or job.config.packing is not None:
            raise
        return None


def protocols(old: Shape, new: Shape) -> Iterator[tuple[Protocol, int]]:
    """Every protocol from a session on ``old`` to one on ``new``, with every saver of ``ONE_RANK``."""
    for saver in range(old.world_size):
        yield Protocol.ONE_RANK, saver
    yield Protocol.MERGE_ALL, 0
    if old.world_size == new.world_size:
        yield Protocol.OWN, 0


@dataclass(frozen=True)
class Step:
    """The last session of a chain: its results, and every item the chain delivered so far."""

    job: Job
    results: tuple[RankResult, ...]
    delivered: tuple[Item, ...]


def chains(rec: Recorder, b: Bounds) -> Iterator[Step]:
    """Every chain of one session and of two sessions joined by a protocol (module docstring)."""
    for job in jobs(rec, b):
        for shape in shapes(job.config.num_splits, b["batch"]):
            start = job.start(shape.world_size)
            for taken in batch_counts(job, start, shape, b["wanted"]):
                rec.at(session_1=shape, taken_1=taken)
                first = lockstep(job, start, shape, taken)
                delivered = tuple(item for r in first for item in r.items)
                yield Step(job, first, delivered)
                if b["sessions"] < 2 or not chained(job, b):
                    continue
                yield from _second_sessions(rec, b, Step(job, first, delivered), shape)


def _second_sessions(rec: Recorder, b: Bounds, first: Step, shape: Shape) -> Iterator[Step]:
    job = first.job
    for nxt in shapes(job.config.num_splits, b["batch_2"]):
        for protocol, saver in protocols(shape, nxt):
            rec.at(session_2=nxt, protocol=protocol, saver=saver)
            starts = resumed(job, first.results, protocol, nxt, saver)
            if starts is None:
                continue
            for taken in batch_counts(job, starts, nxt, b["wanted_2"]):
                rec.at(taken_2=taken)
                second = lockstep(job, starts, nxt, taken)
                yield Step(job, second, first.delivered + tuple(item for r in second for item in r.items))


def chained(job: Job, b: Bounds) -> bool:
    """Whether ``job`` is small enough for sessions after a first one: fault-free jobs of
    ``<= chain_rows`` rows, jobs with faults of ``<= chain_fault_rows`` rows."""
    faulty = bool(job.faults.skipped or job.faults.raising)
    return job.config.num_splits * job.split_len <= b["chain_fault_rows" if faulty else "chain_rows"]


def finish(step: Step) -> tuple[Item, ...]:
    """Merge the chain's last checkpoints and run one iterator over every split to the end of the
    epoch; every item the chain and that last session delivered."""
    job = step.job
    wire = [snapshot_saved(r.checkpoint) for r in step.results]
    start = load_for_rank(job.config, merge_state_dicts(wire), job.split_len, 1, 0)
    last = lockstep(job, [start], Shape(1, 0, 1), 10**9)
    return step.delivered + last[0].items


QUICK_JOBS = {
    "fault_rows": 2, "skip_rows": 2, "clean_rows": 4, "packed_rows": 4, "packed_fault_rows": 1, "doc_len": 2,
    "block_len": 1, "budget": 2,
}  # fmt: skip
FULL_JOBS = {
    "fault_rows": 3, "skip_rows": 4, "clean_rows": 6, "packed_rows": 4, "packed_fault_rows": 2, "doc_len": 2,
    "block_len": 2, "budget": 2,
}  # fmt: skip
QUICK_CHAINS = {
    **QUICK_JOBS, "batch": 1, "batch_2": 1, "wanted": 2, "wanted_2": 1, "sessions": 2, "chain_rows": 2,
    "chain_fault_rows": 2,
}  # fmt: skip
FULL_CHAINS = {
    **FULL_JOBS, "batch": 2, "batch_2": 1, "wanted": 3, "wanted_2": 2, "sessions": 2, "chain_rows": 4,
    "chain_fault_rows": 2,
}  # fmt: skip

JOBS = (
    "rows: every ok/skip/raise fault set over <={fault_rows} rows, every ok/skip one over <={skip_rows} "
    "rows, fault-free over <={clean_rows} rows, skipping or not; packed: <={packed_rows} rows with doc "
    "lengths row % ({doc_len}+1), every ok/skip/raise fault set over <={packed_fault_rows} rows, "
    "L<={block_len}, blocks per split<={budget}"
)
SESSIONS = JOBS + "; every (W, nw), batch_size<={batch}, every lockstep batch count <={wanted}"
CHAINS = (
    SESSIONS + "; fault-free jobs of <={chain_rows} rows and faulty ones of <={chain_fault_rows}: chains "
    "of up to {sessions} sessions, every protocol, saver and next shape, batch_size<={batch_2}, every "
    "batch count <={wanted_2}"
)


# ---------------------------------------------------------------- the schedule against brute force


def brute_counts(counts: Sequence[int], items: int) -> tuple[int, ...]:
    """Counts after ``items`` more pairs of the canonical order, one pair at a time: the next pair is
    the smallest ``(count, split)`` (the heap pop of ``iterate_rows``)."""
    x = list(counts)
    for _ in range(items):
        i = min(range(len(x)), key=lambda s: (x[s], s))
        x[i] += 1
    return tuple(x)


def brute_capacity(counts: Sequence[int], limit: Sequence[int]) -> int:
    """Pairs an iterator yields when split ``i`` has items up to ``limit[i]``, simulated: catch-up
    pops the smallest lagging ``(count, split)`` and ends at a split at its limit; a cycle is
    refused as a whole when one of its splits is at its limit."""
    x, top, out = list(counts), max(counts), 0
    while any(c < top for c in x):
        i = min((s for s in range(len(x)) if x[s] < top), key=lambda s: (x[s], s))
        if x[i] >= limit[i]:
            return out
        x[i] += 1
        out += 1
    while all(c < cap for c, cap in zip(x, limit)):
        x = [c + 1 for c in x]
        out += len(x)
    return out


def brute_round_robin(turns: Sequence[int], batches: int) -> tuple[tuple[int, ...], int]:
    """Torch's in-order loop: visit workers 0, 1, ... cyclically, a worker with no turn left drops
    out; the per-worker deliveries after ``batches`` batches and the worker visited next."""
    left, out, w = list(turns), [0] * len(turns), 0
    delivered = 0
    while delivered < batches and any(left):
        if left[w]:
            left[w] -= 1
            out[w] += 1
            delivered += 1
        w = (w + 1) % len(turns)
    return tuple(out), (w if delivered else 0)


def _vectors(length: int, top: int) -> Iterator[tuple[int, ...]]:
    return itertools.product(range(top + 1), repeat=length)


def check_schedule_arithmetic(rec: Recorder, b: Bounds) -> None:
    """``canonical_counts``, ``canonical_capacity``, ``round_robin_turns`` and ``next_worker``
    against the lemmas' closed forms (``encodings``) and the brute-force simulations."""
    for n in range(1, b["vector_len"] + 1):
        for counts in _vectors(n, b["count"]):
            rec.at(counts=counts)
            for items in range(b["items"] + 1):
                got = canonical_counts(counts, items)
                if got != enc.water_counts(list(counts), items) or got != brute_counts(counts, items):
                    rec.require(False, f"{items} items: {got}, closed form or brute force differ")
            for limit in itertools.product(*(range(c, b["count"] + 2) for c in counts)):
                rec.at(caps=limit)
                cap = canonical_capacity(counts, limit)
                rec.require(cap == enc.capacity_formula(list(counts), list(limit)), f"capacity {cap}")
                rec.require(cap == brute_capacity(counts, limit), f"capacity {cap} != brute force")
                top = canonical_counts(counts, cap)
                rec.require(all(c <= m for c, m in zip(top, limit)), f"counts {top} beyond caps")
        for turns in _vectors(n, b["count"]):
            rec.at(turns=turns)
            for batches in range(sum(turns) + 2):
                got = round_robin_turns(turns, batches)
                want, visit = brute_round_robin(turns, batches)
                rec.require(
                    got == want == enc.turns_counts(list(turns), batches), f"{batches} batches: {got}"
                )
                rec.require(next_worker(got) == visit, f"next worker after {got}")


def _per_role_runs(
    job: Job, topology: Topology, parent: RowState | PackedState, rotation: int
) -> list[object]:
    nw = max(1, topology.num_workers)
    out: list[object] = []
    for w in range(nw):
        role = (w + rotation) % nw
        owned = owned_splits(
            job.config.num_splits, Topology(topology.world_size, topology.rank, topology.num_workers, role)
        )
        if isinstance(parent, PackedState):
            assert job.config.packing is not None and job.corpus is not None
            out.append(iterate_packed(job.perm, job.corpus, job.faults, owned, job.config.packing, parent))
        else:
            out.append(iterate_rows(job.perm, job.faults, owned, parent))
    return out


def torch_order(runs: Sequence[object], batch_size: int) -> list[tuple[int, tuple[Item, ...]]]:
    """Torch's in-order delivery, simulated worker visit by worker visit: a worker hands out its
    next batch, drops out when it has none left, and its error stops everything at its turn."""
    pending: list[deque[tuple[Item, ...]]] = []
    errors: list[bool] = []
    for run in runs:
        items: tuple[Item, ...] = run.rows if hasattr(run, "rows") else run.blocks  # type: ignore[attr-defined]
        full, rest = divmod(len(items), batch_size)
        batches = [items[j * batch_size : (j + 1) * batch_size] for j in range(full)]
        raised = isinstance(run.end, Raised)  # type: ignore[attr-defined]
        if rest and not raised:
            batches.append(items[full * batch_size :])
        pending.append(deque(batches))
        errors.append(raised)
    live, out, w = [True] * len(runs), [], 0
    while any(live):
        if live[w]:
            if pending[w]:
                out.append((w, pending[w].popleft()))
            elif errors[w]:
                break
            else:
                live[w] = False
        w = (w + 1) % len(runs)
    return out


def _loader_parents(job: Job) -> list[RowState | PackedState]:
    """The start of the epoch and every state of one iterator over all splits (unaligned ones too)."""
    n = job.config.num_splits
    everything = tuple(range(n))
    if job.config.packing is None:
        run = iterate_rows(job.perm, job.faults, everything, initial_row_state(n))
        return [run.start, *run.states]
    assert job.corpus is not None
    packed = iterate_packed(
        job.perm, job.corpus, job.faults, everything, job.config.packing, initial_packed_state(n)
    )
    return [packed.start, *packed.states]


def check_loader_schedule(rec: Recorder, job: Job, b: Bounds) -> None:
    """``run_loader`` against torch's loop, the rotation, ``round_robin_turns`` and ``simulate_pass``."""
    n = job.config.num_splits
    for parent, shape in itertools.product(_loader_parents(job), shapes(n, b["batch"])):
        nw = max(1, shape.num_workers)
        saved = exact(job.config, parent)
        for rank, rotation in itertools.product(range(shape.world_size), range(nw)):
            rec.at(parent=parent, shape=shape, rank=rank, rotation=rotation)
            topology = Topology(shape.world_size, rank, shape.num_workers)
            run = run_loader(
                job.config, job.perm, job.faults, topology, parent, shape.batch_size, job.corpus, rotation
            )
            order = torch_order(_per_role_runs(job, topology, parent, rotation), shape.batch_size)
            rec.require(
                [(d.worker, d.items) for d in run.deliveries] == order, "deliveries differ from torch's loop"
            )
            _check_passes(rec, job, saved, shape, rank, rotation, run)


def _check_passes(
    rec: Recorder, job: Job, saved: Saved, shape: Shape, rank: int, rotation: int, run: LoaderRun
) -> None:
    nw = max(1, shape.num_workers)
    counts = [saved.count(s) for s in range(job.config.num_splits)]
    limit = caps(saved, job.split_len)
    block = rank_splits(job.config.num_splits, shape.world_size, rank)
    for taken in range(len(run.deliveries) + 1):
        delivered = [0] * nw
        for d in run.deliveries[:taken]:
            delivered[d.worker] += 1
        rec.require(
            run.next_role_after(taken) == ((next_worker(delivered) + rotation) % nw if nw > 1 else 0),
            f"next role after {taken}",
        )
        if job.skipping and job.config.packing is None:
            continue  # the saver cannot count rows it may not see: those splits are unknown
        p = Pass(shape.num_workers, shape.batch_size, taken, rotation, run.next_role_after(taken))
        got, role = simulate_pass(counts, limit, shape.world_size, rank, p, rotation)
        state = run.state_after(taken)
        real = state.samples if isinstance(state, RowState) else state.emitted
        if got != {s: real[s] for s in block} or (role != p.next_role and nw > 1):
            rec.require(False, f"simulate_pass after {taken}: {got}, {role}; loader: {real}, {p.next_role}")


# ---------------------------------------------------------------- LockstepInferenceInv


def check_lockstep_inference(rec: Recorder, b: Bounds) -> None:
    """The arithmetic against brute force; every loader against ``simulate_pass``; the predicate on the
    last session of every chain."""
    rec.at(part="schedule arithmetic")
    check_schedule_arithmetic(rec, b)
    rec.at(part="loaders")
    for job in jobs(rec, b):
        check_loader_schedule(rec, job, b)
    rec.at(part="chains")
    for step in chains(rec, b):
        rec.apply(
            LockstepInferenceInv,
            step.job.perm,
            step.job.faults,
            step.job.corpus,
            step.results,
            step.job.skipping,
        )


LOCKSTEP_INFERENCE = BoundedCheck(
    "LockstepInferenceInv",
    "schedule arithmetic vs closed forms and brute force: every count/turn vector of length<={vector_len} "
    "with entries<={count}, every cap, <={items} items; every loader of every job from every state of an "
    "iterator over all splits, every rank and rotation, vs torch's loop and simulate_pass; " + CHAINS,
    quick={**QUICK_CHAINS, "vector_len": 3, "count": 2, "items": 6},
    full={**FULL_CHAINS, "vector_len": 4, "count": 3, "items": 10},
    run=check_lockstep_inference,
)


# ---------------------------------------------------------------- MergeReportedInv


def check_merge_reported(rec: Recorder, b: Bounds) -> None:
    """Sessions from the epoch start and (small jobs) from every start a protocol gives after a
    lockstep session on the same shape; every per-rank number of batches (ranks out of step)."""
    for job in jobs(rec, b):
        for shape in shapes(job.config.num_splits, b["batch"]):
            begin = job.start(shape.world_size)
            starts_list = [("epoch start", begin)]
            for taken in batch_counts(job, begin, shape, b["wanted"]) if chained(job, b) else ():
                results = lockstep(job, begin, shape, taken)
                for protocol, saver in protocols(shape, shape):
                    starts = resumed(job, results, protocol, shape, saver)
                    if starts is not None:
                        starts_list.append((f"took {taken}, {protocol} saver {saver}", starts))
            for where, starts in starts_list:
                _merge_reported_from(rec, job, where, starts, shape, b)


def _merge_reported_from(
    rec: Recorder, job: Job, where: str, starts: list[Saved], shape: Shape, b: Bounds
) -> None:
    whole = run_session(
        job.config, job.perm, job.faults, job.corpus, starts, shape, [10**9] * shape.world_size,
        job.split_len, job.skipping,
    )  # fmt: skip
    available = [min(len(r.run.deliveries), b["wanted"]) for r in whole]
    for cuts in itertools.product(*(range(a + 1) for a in available)):
        rec.at(start=where, shape=shape, cuts=cuts)
        results = run_session(
            job.config,
            job.perm,
            job.faults,
            job.corpus,
            starts,
            shape,
            list(cuts),
            job.split_len,
            job.skipping,
        )
        rec.apply(MergeReportedInv, job.perm, job.faults, job.corpus, results)


MERGE_REPORTED = BoundedCheck(
    "MergeReportedInv",
    SESSIONS.replace("every lockstep batch count", "every per-rank batch count (out of step)")
    + "; from the epoch start and from every same-shape start a protocol gives after a lockstep session",
    quick={**QUICK_CHAINS, "wanted": 1},
    full={**FULL_CHAINS, "wanted": 3},
    run=check_merge_reported,
)


# ---------------------------------------------------------------- PartialStateRefusedInv, ReachableLoadInv


def check_partial_refused(rec: Recorder, b: Bounds) -> None:
    """Every session of every chain: each checkpoint on every rank, and its reference-keys-only form."""
    for step in chains(rec, b):
        rec.apply(PartialStateRefusedInv, step.results, step.job.split_len)


PARTIAL_REFUSED = BoundedCheck(
    "PartialStateRefusedInv",
    CHAINS,
    quick={**QUICK_CHAINS, "sessions": 1},
    full=FULL_CHAINS,
    run=check_partial_refused,
)


def check_reachable_load(rec: Recorder, b: Bounds) -> None:
    """Every checkpoint of every session of every chain (a table pin on every other job)."""
    for step in chains(rec, b):
        for r in step.results:
            rec.at(rank=r.rank)
            rec.apply(ReachableLoadInv, r.checkpoint, step.job.split_len)


REACHABLE_LOAD = BoundedCheck(
    "ReachableLoadInv",
    CHAINS,
    quick={**QUICK_CHAINS, "sessions": 1},
    full=FULL_CHAINS,
    run=check_reachable_load,
)


# ---------------------------------------------------------------- ProtocolChainProp


def check_protocol_chain(rec: Recorder, b: Bounds) -> None:
    """Every chain, as far as it went (not finished) and then merged and run to the end (finished)."""
    for step in chains(rec, b):
        job = step.job
        rec.at(finished=False)
        rec.apply(
            ProtocolChainProp, job.perm, job.faults, job.corpus, job.config.packing, step.delivered, False
        )
        rec.at(finished=True)
        rec.apply(ProtocolChainProp, job.perm, job.faults, job.corpus, job.config.packing, finish(step), True)


PROTOCOL_CHAIN = BoundedCheck(
    "ProtocolChainProp",
    CHAINS + "; each chain also merged and run to the end of the epoch",
    quick=QUICK_CHAINS,
    full=FULL_CHAINS,
    run=check_protocol_chain,
)


# ---------------------------------------------------------------- SameTopologyResumeProp


def check_rotation_links(rec: Recorder, b: Bounds) -> None:
    """``run_loader`` with rotation ``o``: worker ``w``'s items are role ``(w + o) mod nw``'s."""
    for job in jobs(rec, b):
        n = job.config.num_splits
        for parent, shape in itertools.product(_loader_parents(job)[:2], shapes(n, 1)):
            nw = max(1, shape.num_workers)
            for rank, rotation in itertools.product(range(shape.world_size), range(nw)):
                rec.at(parent=parent, shape=shape, rank=rank, rotation=rotation)
                topology = Topology(shape.world_size, rank, shape.num_workers)
                run = run_loader(job.config, job.perm, job.faults, topology, parent, 1, job.corpus, rotation)
                roles = {(d.worker + rotation) % nw for d in run.deliveries}
                rec.require(
                    len(roles) == len({d.worker for d in run.deliveries}), "two workers played one role"
                )
                for d in run.deliveries:
                    role = Topology(shape.world_size, rank, shape.num_workers, (d.worker + rotation) % nw)
                    mine = set(owned_splits(n, role))
                    rec.require(
                        all(item.split in mine for item in d.items), f"worker {d.worker} left its role"
                    )


def check_same_topology(rec: Recorder, b: Bounds) -> None:
    """From the epoch start and from every lockstep session before it (merged onto the shape): every
    shape, batch count, protocol and saver."""
    check_rotation_links(rec, b)
    for job in jobs(rec, b):
        n = job.config.num_splits
        befores: list[tuple[str, tuple[RankResult, ...] | None]] = [("epoch start", None)]
        for shape in shapes(n, 1 if b["before"] and chained(job, b) else 0):
            begin = job.start(shape.world_size)
            for taken in batch_counts(job, begin, shape, b["before"]):
                befores.append((f"{shape} took {taken}", lockstep(job, begin, shape, taken)))
        for (where, before), shape in itertools.product(befores, shapes(n, b["batch"])):
            for taken in range(b["wanted"] + 1):
                for protocol, saver in protocols(shape, shape):
                    rec.at(before=where, shape=shape, taken=taken, protocol=protocol, saver=saver)
                    rec.apply(
                        SameTopologyResumeProp,
                        job.config,
                        job.perm,
                        job.faults,
                        job.corpus,
                        before,
                        shape,
                        taken,
                        protocol,
                        job.split_len,
                        job.skipping,
                        saver,
                    )


SAME_TOPOLOGY = BoundedCheck(
    "SameTopologyResumeProp",
    SESSIONS.replace("every lockstep batch count <={wanted}", "every cut <={wanted} batches")
    + "; every protocol and saver; resumed from the epoch start and from every lockstep session of "
    "<={before} batches (batch 1) before it; run_loader's rotation vs its roles",
    quick={**QUICK_CHAINS, "batch": 2, "wanted": 1, "before": 0},
    full={**FULL_CHAINS, "batch": 2, "wanted": 3, "before": 2},
    run=check_same_topology,
)


# ---------------------------------------------------------------- TableVersionPinInv


def _histories(b: Bounds) -> Iterator[tuple[dict[int, Permutation], int, list[Permutation]]]:
    """Tables of <= ``versions`` versions: every sequence of small permutations (appends, deletes,
    reorders) and every set of versions still stored (the latest always is)."""
    pool = [permutation(s, m) for s in (1, 2) for m in (1, 2)] + [((1, 0),), ((0,), (2,))]
    for count in range(1, b["versions"] + 1):
        for versions in itertools.product(pool, repeat=count):
            for kept in itertools.product((False, True), repeat=count - 1):
                history = {v: p for v, p in enumerate(versions[:-1]) if kept[v]}
                history[count - 1] = versions[-1]
                yield history, count - 1, list(versions)


def check_table_pin(rec: Recorder, b: Bounds) -> None:
    """Every history and pin; and every chain of a pinned job keeps the pin in every checkpoint."""
    for history, latest, versions in _histories(b):
        for v, perm in enumerate(versions):
            pin = TablePin(v, sum(len(s) for s in perm))
            rec.at(history=sorted(history), versions=versions, pin=pin)
            try:
                read = pinned_permutation(history, pin, latest)
            except SpecValueError as exc:
                rec.require(exc.code == "table_version_missing", f"raised {exc.code}")
                read = history[latest]
            rec.apply(TableVersionPinInv, history, pin, latest, read)
    for job in (job for job in jobs(rec, b) if chained(job, b)):
        pin = TablePin(3, job.config.num_splits * job.split_len)
        history = {3: job.perm, 4: tuple(reversed(job.perm))}
        for shape in shapes(job.config.num_splits, 1):
            start = job.start(shape.world_size, pin)
            for taken in batch_counts(job, start, shape, b["wanted"]):
                results = lockstep(job, start, shape, taken)
                for nxt in shapes(job.config.num_splits, 1):
                    for protocol, saver in protocols(shape, nxt):
                        rec.at(shape=shape, taken=taken, next_shape=nxt, protocol=protocol, saver=saver)
                        starts = resumed(job, results, protocol, nxt, saver) or []
                        pins = {r.checkpoint.table for r in results} | {s.table for s in starts}
                        rec.require(pins == {pin}, f"the chain carries pins {pins}, not {pin}")
                        read = pinned_permutation(history, pin, 4)
                        rec.apply(TableVersionPinInv, history, pin, 4, read)


TABLE_PIN = BoundedCheck(
    "TableVersionPinInv",
    "histories of <={versions} versions over 6 small permutations, every set of stored versions, every "
    "pin; pinned chains: " + SESSIONS.replace("batch_size<={batch}", "batch_size 1") + ", every protocol",
    quick={**QUICK_JOBS, "versions": 3, "wanted": 1, "chain_rows": 2, "chain_fault_rows": 2},
    full={**FULL_JOBS, "versions": 4, "wanted": 2, "chain_rows": 4, "chain_fault_rows": 2},
    run=check_table_pin,
)
