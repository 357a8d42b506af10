"""The ``mixture`` family: a mixture's schedule, its checkpoints after sessions, and their loads and merges.

Input: a row-mode mixture of three sources (names, each source's ``RunConfig``, the mixture seed,
epoch, ``on_exhausted``, ``cycles``, each source's permutation per epoch, the regimes) and one
operation ``op``:

* ``schedule``: which source (and which of its epochs) each global cycle reads, with the segments
  and how the schedule ends; checked against ``MixtureProportionInv``.
* ``session``: every rank of ``world_size`` resumes ``checkpoints[0]`` (the initial checkpoint
  when none is given) with ``weights`` (``null``: keep the checkpoint's), delivers ``batches``
  batches of ``batch_size`` in lockstep, and writes its checkpoint: the items (source, split,
  row), the merged checkpoint, every rank's one-rank checkpoint, the regimes after the resume and
  whether the ranks finished. Checked against ``MixtureExactlyOnceProp`` (the items since the
  epoch began, when the session starts from the initial checkpoint) and ``MixtureLockstepInv``
  (every one-rank checkpoint resumes world sizes 1, 2 and 4 where the job stood).
* ``load``: what rank ``rank`` of ``world_size`` resumes from ``checkpoints[0]`` with ``weights``:
  the regimes (the new weights apply from the resumed global cycle on) and the exact state of its
  own splits, as a checkpoint reporting them; or the refusal.
* ``merge``: the merge of ``checkpoints``, or the refusal.

Packing mixtures are not in this family (the mixture machine checks them on the pipeline).

Rules of this module: those of every family module, stated once in the package docstring
(:mod:`elastic_loader.testing.vectors.families`).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, replace

from ....spec.mixture import MixtureItem, initial_mixture_state
from ....spec.mixture_saved import (
    MixtureSaved,
    exact_mixture,
    load_mixture,
    load_mixture_for_rank,
    merge_mixture,
    run_mixture_session,
    snapshot_mixture,
)
from ....spec.mixture_schedule import MixtureConfig, Regime, SourceData, mixture_schedule
from ....spec.rows import Yielded
from ....spec.topology import Permutation, RunConfig, cut_splits, rank_splits
from ..codec import (
    Json,
    as_int,
    as_ints,
    as_list,
    as_object,
    as_str,
    dec_config,
    dec_permutation,
    enc_config,
    enc_permutation,
    encode_ints,
)
from .base import CaseDef, Codec, JsonObject, SpecError, attempt, error_json, family, inv, make_case

NAMES = ("web", "code", "books")


@dataclass(frozen=True)
class MixtureInput:
    """A mixture and one operation on it (see the module docstring)."""

    op: str
    sources: tuple[RunConfig, ...]
    perms: tuple[tuple[Permutation, ...], ...]
    """Per source, its permutation of epoch 0, 1, ..."""
    regimes: tuple[tuple[int, tuple[int, ...]], ...]
    seed: int = 0
    on_exhausted: str = "stop"
    cycles: int | None = None
    world_size: int = 1
    rank: int = 0
    batch_size: int = 1
    batches: int = 0
    weights: tuple[int, ...] | None = None
    checkpoints: tuple[str, ...] = ()
    """Checkpoints as canonical JSON text (``sort_keys``)."""

    def config(self) -> MixtureConfig:
        return MixtureConfig(NAMES, self.sources, self.seed, 0, self.on_exhausted, self.cycles)

    def data(self) -> tuple[SourceData, ...]:
        return tuple(SourceData(dict(enumerate(perms))) for perms in self.perms)

    def regime_list(self) -> tuple[Regime, ...]:
        return tuple(Regime(start, weights) for start, weights in self.regimes)


def _canonical(checkpoint: object) -> str:
    return json.dumps(checkpoint, sort_keys=True)


def _encode(x: MixtureInput) -> JsonObject:
    return {
        "op": x.op,
        "names": list(NAMES),
        "sources": [enc_config(c) for c in x.sources],
        "perms": [[enc_permutation(p) for p in perms] for perms in x.perms],
        "regimes": [{"start": s, "weights": encode_ints(w)} for s, w in x.regimes],
        "seed": x.seed,
        "on_exhausted": x.on_exhausted,
        "cycles": x.cycles,
        "world_size": x.world_size,
        "rank": x.rank,
        "batch_size": x.batch_size,
        "batches": x.batches,
        "weights": None if x.weights is None else encode_ints(x.weights),
        "checkpoints": [json.loads(c) for c in x.checkpoints],
    }


def _decode(j: JsonObject) -> MixtureInput:
    if tuple(as_str(n) for n in as_list(j["names"])) != NAMES:
        raise ValueError(f"the mixture vectors name their sources {NAMES}")
    return MixtureInput(
        as_str(j["op"]),
        tuple(dec_config(c) for c in as_list(j["sources"])),
        tuple(tuple(dec_permutation(p) for p in as_list(perms)) for perms in as_list(j["perms"])),
        tuple(
            (as_int(as_object(r)["start"]), as_ints(as_object(r)["weights"])) for r in as_list(j["regimes"])
        ),
        as_int(j["seed"]),
        as_str(j["on_exhausted"]),
        None if j["cycles"] is None else as_int(j["cycles"]),
        as_int(j["world_size"]),
        as_int(j["rank"]),
        as_int(j["batch_size"]),
        as_int(j["batches"]),
        None if j["weights"] is None else as_ints(j["weights"]),
        tuple(_canonical(c) for c in as_list(j["checkpoints"])),
    )


def _item(item: MixtureItem) -> Json:
    inner = item.item
    assert isinstance(inner, Yielded), "the mixture vectors are row mode"
    return [NAMES[item.source], item.epoch, inner.split, inner.row_id]


def _snapshot(saved: MixtureSaved) -> JsonObject:
    out: JsonObject = json.loads(json.dumps(snapshot_mixture(saved)))
    return out


def _start(x: MixtureInput) -> object:
    if x.checkpoints:
        return json.loads(x.checkpoints[0])
    config = x.config()
    return json.loads(
        json.dumps(snapshot_mixture(exact_mixture(config, x.regime_list(), initial_mixture_state(config))))
    )


def _schedule(x: MixtureInput) -> JsonObject:
    schedule = mixture_schedule(x.config(), x.regime_list(), x.data())
    inv.MixtureProportionInv(schedule)
    return {
        "slots": [[NAMES[s.source], s.epoch, s.index] for s in schedule.slots],
        "segments": [
            {"start": g.start, "end": g.end, "weights": encode_ints(g.weights)} for g in schedule.segments
        ],
        "end": schedule.end,
    }


def _session(x: MixtureInput) -> JsonObject:
    config, data = x.config(), x.data()
    session = run_mixture_session(
        config, data, _start(x), (x.world_size, 0), x.batch_size, x.batches, x.weights, skipping=False
    )
    schedule = mixture_schedule(config, session.regimes, data)
    if not x.checkpoints:  # from the epoch's start: the items are everything delivered so far
        inv.MixtureExactlyOnceProp(config, data, schedule, list(session.items), session.finished)
    for saved in session.one_rank:
        loaded = load_mixture(config, data, _snapshot(saved))
        for world_size in (1, 2, 4):
            if config.num_splits % world_size == 0:
                inv.MixtureLockstepInv(data, session.truth.state, loaded, world_size, may_refuse=False)
    return {
        "items": [_item(i) for i in session.items],
        "merged": _snapshot(session.truth),
        "one_rank": [_snapshot(s) for s in session.one_rank],
        "regimes": [{"start": r.start, "weights": encode_ints(r.weights)} for r in session.regimes],
        "finished": session.finished,
    }


def _load(x: MixtureInput) -> JsonObject:
    config, data = x.config(), x.data()
    regimes, state = load_mixture_for_rank(config, data, _start(x), x.world_size, x.rank, x.weights)
    own = frozenset(rank_splits(config.num_splits, x.world_size, x.rank))
    return {"resumed": _snapshot(MixtureSaved(config, regimes, state, own))}


def _merge(x: MixtureInput) -> JsonObject:
    config, data = x.config(), x.data()
    merged = merge_mixture(data, [load_mixture(config, data, json.loads(c)) for c in x.checkpoints])
    return {"merged": _snapshot(merged)}


OPS = {"schedule": _schedule, "session": _session, "load": _load, "merge": _merge}


def _run(x: MixtureInput) -> JsonObject:
    if x.op not in OPS:
        raise ValueError(f"unknown mixture operation {x.op!r}; one of {sorted(OPS)}")
    result = attempt(lambda: OPS[x.op](x))
    if isinstance(result, SpecError):
        return error_json(result)
    return result


CODEC = Codec(_encode, _decode, _run)


# ---------------------------------------------------------------- the cases

SPLITS = 4
LENGTHS = (3, 2, 1)
"""Rows per split of each source (12, 8 and 4 rows)."""


def _perms(epochs: int) -> tuple[tuple[Permutation, ...], ...]:
    out = []
    for k, m in enumerate(LENGTHS):
        rng = random.Random(1000 + k)
        ids = list(range(100 * k, 100 * k + SPLITS * m))
        perms = []
        for _ in range(epochs):
            rng.shuffle(ids)
            perms.append(cut_splits(list(ids), SPLITS))
        out.append(tuple(perms))
    return tuple(out)


def _base(mode: str, weights: tuple[int, ...], cycles: int | None = None, seed: int = 3) -> MixtureInput:
    epochs = (cycles or 0) + 1 if mode == "cycle" else 1
    sources = tuple(RunConfig(SPLITS, k, 0) for k in range(len(NAMES)))
    return MixtureInput("schedule", sources, _perms(epochs), ((0, weights),), seed, mode, cycles)


def _session_cases(mode: str, cycles: int | None) -> list[CaseDef]:
    """Sessions from the epoch start, the checkpoint after k steps, resumes on other world sizes
    with new weights, loads and merges of those checkpoints."""

    def case(name: str, description: str, x: MixtureInput) -> CaseDef:
        return make_case("mixture", CODEC, name, description, x)

    out: list[CaseDef] = []
    base = replace(_base(mode, (2, 1, 1), cycles), op="session")
    for ws, bs, k in ((1, 2, 3), (2, 1, 2), (4, 1, 1), (2, 2, 100)):
        first = replace(base, world_size=ws, batch_size=bs, batches=k)
        out.append(
            case(
                f"session_{mode}_world{ws}_batch{bs}_steps{k}",
                f"{ws} rank(s) deliver {k} batches of {bs} from the epoch's start ({mode})",
                first,
            )
        )
    first = replace(base, world_size=2, batch_size=2, batches=2)
    made = _session(first)
    merged = _canonical(made["merged"])
    one = _canonical(as_list(made["one_rank"])[1])
    out.append(
        case(
            f"session_{mode}_resume_merge_on_4_new_weights",
            "the merged checkpoint of 2 ranks after 2 batches resumes on 4 ranks with weights (1, 0, 3)",
            replace(base, world_size=4, batch_size=1, batches=3, weights=(1, 0, 3), checkpoints=(merged,)),
        )
    )
    out.append(
        case(
            f"session_{mode}_resume_one_rank_on_1",
            "rank 1's own checkpoint of that session resumes the whole job on 1 rank, same weights",
            replace(base, world_size=1, batch_size=3, batches=4, checkpoints=(one,)),
        )
    )
    loads = replace(base, op="load", checkpoints=(merged,))
    out.append(
        case(
            f"load_{mode}_merged_rank1_of_2",
            "rank 1 of 2 resumes the merge",
            replace(loads, world_size=2, rank=1),
        )
    )
    out.append(
        case(
            f"load_{mode}_merged_rank3_of_4_new_weights",
            "rank 3 of 4 resumes the merge with weights (0, 1, 1): they apply from the resumed cycle on",
            replace(loads, world_size=4, rank=3, weights=(0, 1, 1)),
        )
    )
    out.append(
        case(
            f"load_{mode}_one_rank_rank0_of_4",
            "rank 0 of 4 resumes rank 1's own checkpoint",
            replace(loads, world_size=4, rank=0, checkpoints=(one,)),
        )
    )
    ranks = as_list(made["one_rank"])
    every = replace(base, op="merge", checkpoints=tuple(_canonical(r) for r in ranks))

    def same(x: MixtureInput = every, want: str = merged) -> None:
        if _canonical(_merge(x)["merged"]) != want:
            raise AssertionError("merging every rank's checkpoint is not the session's merged one")

    out.append(
        make_case(
            "mixture",
            CODEC,
            f"merge_{mode}_every_rank",
            "merging both ranks' checkpoints gives the merged one",
            every,
            same,
        )
    )
    return out


def cases() -> list[CaseDef]:
    """Mixture schedules, sessions (checkpoints after k steps, weight changes at resume), loads and merges."""

    def case(name: str, description: str, x: MixtureInput) -> CaseDef:
        return make_case("mixture", CODEC, name, description, x)

    out: list[CaseDef] = []
    weight_sets = [(1, 1, 1), (2, 1, 1), (3, 1, 0), (0, 0, 1), (5, 3, 2)]
    for mode, cycles in (("stop", None), ("stop", 6), ("cycle", 6), ("renormalize", None)):
        for w in weight_sets:
            label = "_".join(map(str, w))
            out.append(
                case(
                    f"schedule_{mode}{'' if cycles is None else cycles}_w{label}",
                    f"the schedule of weights {w}, on_exhausted={mode!r}, cycles={cycles}",
                    _base(mode, w, cycles),
                )
            )
    two = replace(_base("renormalize", (1, 1, 1)), regimes=((0, (1, 1, 1)), (3, (4, 0, 1))))
    out.append(case("schedule_two_regimes", "weights (1, 1, 1), then (4, 0, 1) from global cycle 3", two))
    out.append(
        case(
            "schedule_tie_order_seed",
            "equal weights, another mixture seed",
            _base("stop", (1, 1, 1), None, 11),
        )
    )
    bad = replace(_base("stop", (0, 0, 0)))
    out.append(case("schedule_refuses_all_zero_weights", "every weight 0: refused", bad))
    out.append(
        case(
            "schedule_refuses_unknown_mode",
            "on_exhausted must be stop, cycle or renormalize",
            _base("wrap", (1, 1, 1)),
        )
    )

    for mode, cycles in (("stop", None), ("cycle", 4), ("renormalize", None)):
        out += _session_cases(mode, cycles)
    out += _refusals(replace(_base("stop", (2, 1, 1)), op="session"))
    return out


def _refusals(base: MixtureInput) -> list[CaseDef]:
    """Loads and merges the spec refuses: another mixture, a renamed source, bad values."""
    made = _session(replace(base, world_size=2, batch_size=2, batches=2))
    merged = as_object(made["merged"])

    def edited(change: str) -> str:
        state = json.loads(json.dumps(merged))
        if change == "names":
            state["mixture"]["names"] = ["web", "code", "novels"]
        elif change == "seed":
            state["mixture"]["seed"] = 99
        elif change == "cycles":
            state["cycles"] = [1, 2, 3]
        elif change == "regimes":
            state["regimes"] = [{"start": 0, "weights": [0, 0, 0]}]
        elif change == "format":
            state["format"] = 2
        return _canonical(state)

    out = []
    loads = replace(base, op="load", world_size=2, rank=0)
    for change in ("names", "seed", "cycles", "regimes", "format"):
        out.append(
            make_case(
                "mixture",
                CODEC,
                f"load_refuses_edited_{change}",
                f"a checkpoint whose {change} does not fit the mixture is refused",
                replace(loads, checkpoints=(edited(change),)),
            )
        )
    out.append(
        make_case(
            "mixture",
            CODEC,
            "load_refuses_wrong_weight_count",
            "new weights must give one weight per source",
            replace(loads, checkpoints=(_canonical(merged),), weights=(1, 1)),
        )
    )
    out.append(
        make_case(
            "mixture",
            CODEC,
            "merge_refuses_another_mixture",
            "checkpoints of mixtures with other seeds do not merge",
            replace(base, op="merge", checkpoints=(_canonical(merged), edited("seed"))),
        )
    )
    out.append(
        make_case(
            "mixture",
            CODEC,
            "merge_refuses_nothing",
            "merging no checkpoint is refused",
            replace(base, op="merge"),
        )
    )
    return out


FAMILY = family("mixture", cases, CODEC)
