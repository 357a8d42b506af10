"""The ``schedule`` family: the delivery arithmetic a rank infers the other ranks' progress with.

Inputs are counts (samples or blocks per split), caps and batch counts, never rows: this is what a
rank can compute about splits it does not read. Functions: ``canonical_capacity``,
``canonical_counts``, ``round_robin_turns``, ``next_worker`` (``schedule.py``) and
``simulate_pass`` (``saved.py``: one rank's counts after a loader pass). Every result is checked
against an independent computation: the canonical order and torch's round robin simulated one
item (one batch) at a time, and ``simulate_pass`` against :func:`~elastic_loader.spec.loader.run_loader`
over a permutation whose splits end at the caps.

Rules of this module: those of every family module, stated once in the package docstring
(:mod:`elastic_loader.testing.vectors.families`).
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Sequence
from dataclasses import dataclass

from ....spec.inference import Pass, simulate_pass
from ....spec.loader import run_loader
from ....spec.rows import Faults, RowState, Yielded
from ....spec.schedule import canonical_capacity, canonical_counts, next_worker, round_robin_turns
from ....spec.topology import RunConfig, Topology, rank_splits
from ..codec import VectorFormatError, as_int, as_ints, as_str, encode_ints
from .base import CaseDef, Codec, JsonObject, SpecError, attempt, error_json, family, make_case

FUNCTIONS = ("canonical_capacity", "canonical_counts", "round_robin_turns", "next_worker", "simulate_pass")
"""The functions this family asks about, in the order the cases list them."""

_FIELDS: dict[str, tuple[str, ...]] = {
    "canonical_capacity": ("counts", "caps"),
    "canonical_counts": ("counts", "items"),
    "round_robin_turns": ("turns", "batches"),
    "next_worker": ("delivered",),
    "simulate_pass": (
        "counts",
        "caps",
        "world_size",
        "rank",
        "num_workers",
        "batch_size",
        "batches",
        "rotation",
    ),
}
"""The input fields of each function (integer lists or integers)."""

_LISTS = {"counts", "caps", "turns", "delivered"}


@dataclass(frozen=True)
class ScheduleInput:
    """One call: the function's name and its arguments by field name."""

    function: str
    args: tuple[tuple[str, int | tuple[int, ...]], ...]

    def get(self, name: str) -> int | tuple[int, ...]:
        """The argument ``name``."""
        return dict(self.args)[name]

    def ints(self, name: str) -> tuple[int, ...]:
        """The integer-list argument ``name``."""
        value = self.get(name)
        assert isinstance(value, tuple)
        return value

    def int(self, name: str) -> int:
        """The integer argument ``name``."""
        value = self.get(name)
        assert isinstance(value, int)
        return value


def _encode(x: ScheduleInput) -> JsonObject:
    out: JsonObject = {"function": x.function}
    for name, value in x.args:
        out[name] = encode_ints(value) if isinstance(value, tuple) else value
    return out


def _decode(j: JsonObject) -> ScheduleInput:
    function = as_str(j["function"])
    if function not in _FIELDS:
        raise VectorFormatError(f"unknown function {function!r}")
    args = tuple(
        (name, as_ints(j[name]) if name in _LISTS else as_int(j[name])) for name in _FIELDS[function]
    )
    return ScheduleInput(function, args)


def _run(x: ScheduleInput) -> JsonObject:
    result = attempt(lambda: _call(x))
    if isinstance(result, SpecError):
        return error_json(result)
    return result


def _call(x: ScheduleInput) -> JsonObject:
    """The model's answer, checked against the brute-force one."""
    if x.function == "canonical_capacity":
        items = canonical_capacity(x.ints("counts"), x.ints("caps"))
        _agree(items, _walk(x.ints("counts"), x.ints("caps"), None)[0], x)
        return {"items": items}
    if x.function == "canonical_counts":
        counts = canonical_counts(x.ints("counts"), x.int("items"))
        unbounded = tuple(c + x.int("items") for c in x.ints("counts"))
        _agree(counts, _walk(x.ints("counts"), unbounded, x.int("items"))[1], x)
        return {"counts": encode_ints(counts)}
    if x.function == "round_robin_turns":
        delivered = round_robin_turns(x.ints("turns"), x.int("batches"))
        brute, following = _round_robin(x.ints("turns"), x.int("batches"))
        _agree((delivered, next_worker(delivered)), (brute, following), x)
        return {"delivered": encode_ints(delivered)}
    if x.function == "next_worker":
        return {"worker": next_worker(x.ints("delivered"))}
    return _simulate(x)


def _agree(model: object, brute: object, x: ScheduleInput) -> None:
    if model != brute:
        raise AssertionError(
            f"schedule/{x.function}{dict(x.args)}: the model gives {model}, one by one {brute}"
        )


def _walk(counts: Sequence[int], caps: Sequence[int], limit: int | None) -> tuple[int, tuple[int, ...]]:
    """An iterator over splits at ``counts`` (caps ``caps``), one item at a time: catch-up of the
    lagging splits in ``(count, split)`` order, then cycles that start only when every split can
    give its next item. Stops after ``limit`` items; returns the items and the counts."""
    now = list(counts)
    items = 0
    top = max(now, default=0)
    heap = [(c, i) for i, c in enumerate(now) if c < top]
    heapq.heapify(heap)
    while heap and (limit is None or items < limit):
        c, i = heapq.heappop(heap)
        if c >= caps[i]:
            return items, tuple(now)
        now[i] += 1
        items += 1
        if now[i] < top:
            heapq.heappush(heap, (now[i], i))
    while now and all(c < cap for c, cap in zip(now, caps)):
        for i in range(len(now)):
            if limit is not None and items == limit:
                return items, tuple(now)
            now[i] += 1
            items += 1
    return items, tuple(now)


def _round_robin(turns: Sequence[int], batches: int) -> tuple[tuple[int, ...], int]:
    """Torch's in-order round robin, one batch at a time: delivered per worker, and the next worker."""
    delivered = [0] * len(turns)
    last = -1
    while batches > 0 and any(d < t for d, t in zip(delivered, turns)):
        for w, t in enumerate(turns):
            if batches > 0 and delivered[w] < t:
                delivered[w] += 1
                batches -= 1
                last = w
    return tuple(delivered), (last + 1) % len(turns) if last >= 0 else 0


def _simulate(x: ScheduleInput) -> JsonObject:
    """``simulate_pass`` of rank ``rank``, checked against ``run_loader`` over a permutation whose
    split ``s`` has ``caps[s] - counts[s]`` yieldable rows after position ``counts[s]``."""
    counts, caps = x.ints("counts"), x.ints("caps")
    p = Pass(x.int("num_workers"), x.int("batch_size"), x.int("batches"), x.int("rotation"))
    got, role = simulate_pass(counts, caps, x.int("world_size"), x.int("rank"), p, p.rotation)
    after = list(counts)
    for s, c in got.items():
        after[s] = c
    _check_against_loader(counts, caps, x, p, tuple(after), role)
    return {"counts": encode_ints(after), "next_role": role}


def _check_against_loader(
    counts: Sequence[int], caps: Sequence[int], x: ScheduleInput, p: Pass, after: tuple[int, ...], role: int
) -> None:
    length = max(caps, default=0) + 1
    perm = tuple(tuple(s * length + q for q in range(length)) for s in range(len(counts)))
    skipped = frozenset(s * length + q for s, cap in enumerate(caps) for q in range(cap, length))
    topology = Topology(x.int("world_size"), x.int("rank"), p.num_workers)
    start = RowState(tuple(counts), tuple(counts))
    run = run_loader(
        RunConfig(len(counts), 0, 0), perm, Faults(skipped), topology, start, p.batch_size, None, p.rotation
    )
    taken = min(p.batches, len(run.deliveries))
    state = run.state_after(taken)
    assert isinstance(state, RowState)
    rows = [y for d in run.deliveries[:taken] for y in d.items if isinstance(y, Yielded)]
    block = rank_splits(len(counts), x.int("world_size"), x.int("rank"))
    if state.samples != after or len(rows) != sum(after[s] - counts[s] for s in block):
        raise AssertionError(f"schedule/simulate_pass{dict(x.args)}: the loader gets to {state.samples}")
    if run.next_role_after(taken) != role:
        raise AssertionError(f"schedule/simulate_pass{dict(x.args)}: the loader's next role differs")


CODEC = Codec(_encode, _decode, _run)


def _case(name: str, description: str, function: str, **args: int | Sequence[int]) -> CaseDef:
    fields = _FIELDS[function]
    assert set(args) == set(fields), (function, sorted(args))
    value = ScheduleInput(
        function, tuple((f, tuple(v) if isinstance(v, Sequence) else v) for f in fields for v in [args[f]])
    )
    return make_case("schedule", CODEC, name, description, value)


def cases() -> list[CaseDef]:
    """The delivery arithmetic: iterator capacities and counts, round robin turns, one rank's loader pass."""
    return [
        *_capacity_cases(),
        *_counts_cases(),
        *_round_robin_cases(),
        *_pass_cases(),
        *_error_cases(),
        *_random_cases(),
    ]


def _capacity_cases() -> list[CaseDef]:
    """How many items an iterator yields before it ends."""
    f = "canonical_capacity"
    return [
        _case(
            "capacity_fresh_splits", "two splits of 3 from the start: 6 items", f, counts=[0, 0], caps=[3, 3]
        ),
        _case(
            "capacity_ends_in_catch_up",
            "split 1 can only reach 1 while catching up to 2",
            f,
            counts=[2, 0],
            caps=[3, 1],
        ),
        _case(
            "capacity_ends_before_a_cycle",
            "cycle 1 needs an item split 1 does not have",
            f,
            counts=[1, 1],
            caps=[3, 1],
        ),
        _case(
            "capacity_catch_up_then_cycles",
            "catch up to 2, then cycles until split 0 ends",
            f,
            counts=[2, 0, 1],
            caps=[4, 5, 6],
        ),
        _case(
            "capacity_ends_at_first_split_of_a_tie",
            "the first split at the lowest cap ends it",
            f,
            counts=[0, 0, 0],
            caps=[5, 2, 2],
        ),
        _case("capacity_no_splits", "an iterator without splits yields nothing", f, counts=[], caps=[]),
        _case(
            "capacity_at_cap", "a split at its cap ends the iterator at once", f, counts=[3, 1], caps=[3, 4]
        ),
    ]


def _counts_cases() -> list[CaseDef]:
    """The counts after some items: a water level."""
    f = "canonical_counts"
    return [
        _case(
            "counts_catch_up",
            "three catch-up items bring splits 1 and 2 to 2",
            f,
            counts=[2, 0, 1, 2],
            items=3,
        ),
        _case(
            "counts_cycles", "four items from the start: a cycle and one more", f, counts=[0, 0, 0], items=4
        ),
        _case(
            "counts_catch_up_and_cycles",
            "catch-up, then a cycle, then part of one",
            f,
            counts=[3, 1, 0],
            items=9,
        ),
        _case("counts_zero_items", "no item changes nothing", f, counts=[1, 4], items=0),
        _case(
            "counts_ties_go_to_the_first_split",
            "an item past a level goes to the lowest split id",
            f,
            counts=[5, 5, 5],
            items=2,
        ),
    ]


def _round_robin_cases() -> list[CaseDef]:
    """Batches per worker after some batches, and the worker whose batch comes next."""
    f, g = "round_robin_turns", "next_worker"
    return [
        _case(
            "turns_two_workers", "three batches: worker 0 twice, worker 1 once", f, turns=[3, 3], batches=3
        ),
        _case(
            "turns_a_worker_runs_out", "worker 0 has one batch and drops out", f, turns=[1, 3, 3], batches=5
        ),
        _case("turns_beyond_the_end", "more batches than the loader has", f, turns=[2, 1], batches=9),
        _case("turns_no_batches", "nothing delivered", f, turns=[2, 2, 2], batches=0),
        _case("next_after_a_full_round", "after worker 1 comes worker 0", g, delivered=[2, 2]),
        _case("next_mid_round", "after worker 0 comes worker 1", g, delivered=[2, 1]),
        _case(
            "next_after_a_worker_ran_out",
            "an exhausted worker keeps its place: after worker 2 comes worker 0",
            g,
            delivered=[1, 2, 2],
        ),
        _case("next_before_any_batch", "nothing delivered: worker 0", g, delivered=[0, 0, 0]),
    ]


_PASS_TABLE: tuple[tuple[str, str, tuple[int, ...], tuple[int, ...], tuple[int, ...]], ...] = (
    # name, description, counts, caps, (world_size, rank, num_workers, batch_size, batches, rotation)
    ("pass_in_process", "rank 1 of 2 without workers, 3 batches of 2 from a mid-cycle start",
     (2, 2, 1, 0), (5, 5, 5, 5), (2, 1, 0, 2, 3, 0)),
    ("pass_two_workers", "rank 0 of 2 with 2 workers, 3 batches of 1",
     (0, 0, 0, 0), (5, 5, 5, 5), (2, 0, 2, 1, 3, 0)),
    ("pass_rotated", "the same with torch worker 0 in role 1",
     (0, 1, 0, 0), (5, 5, 5, 5), (2, 0, 2, 1, 3, 1)),
    ("pass_a_worker_runs_dry", "rank 0's worker over split 0 ends after 1 item; the other worker goes on",
     (0, 0, 0, 0), (1, 4, 4, 4), (2, 0, 2, 1, 4, 0)),
    ("pass_partial_last_batch", "batches of 3 over a worker with 4 items: a full batch and a partial one",
     (0, 0, 0, 0), (2, 2, 2, 2), (2, 1, 2, 3, 9, 0)),
    ("error_pass_rotation_beyond_workers", "a rotation is a role below num_workers",
     (0, 0), (2, 2), (1, 0, 2, 1, 1, 2)),
    ("error_pass_negative_batches", "a pass delivers a number of batches",
     (0, 0), (2, 2), (1, 0, 0, 1, -1, 0)),
    ("error_pass_batch_size_zero", "batches hold an item at least",
     (0, 0), (2, 2), (1, 0, 0, 0, 1, 0)),
    ("error_pass_workers_do_not_divide_splits", "3 workers cannot share 2 splits",
     (0, 0), (2, 2), (1, 0, 3, 1, 1, 0)),
)  # fmt: skip
"""The ``simulate_pass`` cases, one row each; the ``error_`` rows are listed with the other errors."""

_PASS_SCALARS = _FIELDS["simulate_pass"][2:]


def _pass(name: str, description: str, counts: Sequence[int], caps: Sequence[int], **scalars: int) -> CaseDef:
    return _case(name, description, "simulate_pass", counts=counts, caps=caps, **scalars)


def _pass_rows(errors: bool) -> list[CaseDef]:
    return [
        _pass(name, description, counts, caps, **dict(zip(_PASS_SCALARS, scalars)))
        for name, description, counts, caps, scalars in _PASS_TABLE
        if name.startswith("error_") == errors
    ]


def _pass_cases() -> list[CaseDef]:
    """One rank's counts after a loader pass, and its next role."""
    return _pass_rows(errors=False)


def _error_cases() -> list[CaseDef]:
    """Arguments the arithmetic refuses."""
    return [
        _case(
            "error_caps_of_other_length", "one cap per split", "canonical_capacity", counts=[0, 0], caps=[1]
        ),
        _case(
            "error_cap_below_count",
            "a cap is never below its count",
            "canonical_capacity",
            counts=[2, 0],
            caps=[1, 3],
        ),
        _case("error_negative_count", "counts are not negative", "canonical_capacity", counts=[-1], caps=[2]),
        _case("error_negative_items", "items are not negative", "canonical_counts", counts=[0], items=-1),
        _case(
            "error_items_without_splits",
            "an iterator without splits has no item",
            "canonical_counts",
            counts=[],
            items=1,
        ),
        _case(
            "error_negative_batches", "batches are not negative", "round_robin_turns", turns=[1], batches=-1
        ),
        *_pass_rows(errors=True),
    ]


def _random_cases() -> list[CaseDef]:
    """Seeded random arguments of every function."""
    out: list[CaseDef] = []
    for seed in range(6):
        rng = random.Random(3000 + seed)
        n = rng.randint(1, 4)
        counts = [rng.randint(0, 4) for _ in range(n)]
        caps = [c + rng.randint(0, 4) for c in counts]
        desc = f"random(seed={3000 + seed})"
        out.append(_case(f"random_capacity_{seed:02d}", desc, "canonical_capacity", counts=counts, caps=caps))
        out.append(
            _case(
                f"random_counts_{seed:02d}",
                desc,
                "canonical_counts",
                counts=counts,
                items=rng.randint(0, 3 * n),
            )
        )
        turns = [rng.randint(0, 4) for _ in range(rng.randint(1, 4))]
        batches = rng.randint(0, sum(turns) + 1)
        out.append(_case(f"random_turns_{seed:02d}", desc, "round_robin_turns", turns=turns, batches=batches))
        out.append(
            _case(
                f"random_next_{seed:02d}",
                desc,
                "next_worker",
                delivered=list(_round_robin(turns, batches)[0]),
            )
        )
        world_size, nw = rng.choice(((1, 0), (1, 2), (2, 0), (2, 2), (1, 4)))
        splits = 4
        pass_counts = [rng.randint(0, 2) for _ in range(splits)]
        pass_caps = [c + rng.randint(0, 3) for c in pass_counts]
        out.append(
            _pass(
                f"random_pass_{seed:02d}",
                desc,
                counts=pass_counts,
                caps=pass_caps,
                world_size=world_size,
                rank=rng.randrange(world_size),
                num_workers=nw,
                batch_size=rng.randint(1, 3),
                batches=rng.randint(0, 6),
                rotation=rng.randrange(max(1, nw)),
            )
        )
    return out


FAMILY = family("schedule", cases, CODEC)
