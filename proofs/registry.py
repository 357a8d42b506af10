"""The machine checks of every invariant, keyed by the invariant's exact name.

``REGISTRY[name]`` holds the SMT lemmas about the arithmetic core of
``name`` (possibly none) and its bounded exhaustive checks of the executable
spec (at least one). ``proofs/<name>.md`` is the written proof; a test keeps
the three in step with ``INVARIANT_NAMES``.
"""

from __future__ import annotations

from dataclasses import dataclass

from elastic_loader.spec.invariants import INVARIANT_NAMES

from . import (
    bounded_checkpoint as ck,
    bounded_computed as cp,
    bounded_local as lc,
    bounded_mixture as mx,
    bounded_packing as pk,
    bounded_rows as rw,
    bounded_saved as sv,
    bounded_topology as tp,
)
from .framework import BoundedCheck, Lemma
from .smt import LEMMAS as CORE_LEMMAS
from .smt_computed import LEMMAS as COMPUTED_LEMMAS
from .smt_local import LEMMAS as LOCAL_LEMMAS
from .smt_mixture import LEMMAS as MIXTURE_LEMMAS
from .smt_saved import LEMMAS as SAVED_LEMMAS


@dataclass(frozen=True)
class InvariantChecks:
    """Everything the machine checks say about one invariant."""

    name: str
    lemmas: tuple[Lemma, ...]
    bounded: tuple[BoundedCheck, ...]


_BOUNDED: tuple[BoundedCheck, ...] = (
    tp.PARTITION,
    tp.SPLIT_SIZE,
    cp.COMPUTED_BIJECTION,
    cp.SIZES,
    rw.PROGRESS_BOUNDS,
    rw.SKIP_ACCOUNTING,
    rw.HONEST_PROGRESS,
    rw.CATCH_UP,
    ck.LATTICE_ROWS,
    pk.LATTICE_PACKED,
    ck.ROUND_TRIP_ROWS,
    pk.ROUND_TRIP_PACKED,
    pk.CONSERVATION,
    pk.DOC_IDS,
    pk.AUTO_BUDGET,
    rw.CANONICAL_ORDER,
    tp.ELASTIC,
    rw.RESUME_ROWS,
    pk.RESUME_PACKED,
    rw.EXACTLY_ONCE,
    ck.MERGE_EXACT_ROWS,
    pk.MERGE_EXACT_PACKED,
    ck.CONSUMER_COMMIT,
    pk.BUDGET,
    rw.RAISE_POSITION,
    sv.LOCKSTEP_INFERENCE,
    sv.MERGE_REPORTED,
    sv.PARTIAL_REFUSED,
    sv.REACHABLE_LOAD,
    sv.TABLE_PIN,
    sv.PROTOCOL_CHAIN,
    sv.SAME_TOPOLOGY,
    # the local permutation
    lc.LOCAL_BIJECTION,
    lc.LOCAL_LOCALITY,
    lc.LOCAL_DEGENERACY,
    # mixtures
    mx.MIXTURE_PROPORTION,
    mx.MIXTURE_LOCKSTEP,
    mx.MIXTURE_ELASTIC,
    mx.MIXTURE_EXACTLY_ONCE,
)


LEMMAS: tuple[Lemma, ...] = CORE_LEMMAS + COMPUTED_LEMMAS + SAVED_LEMMAS + LOCAL_LEMMAS + MIXTURE_LEMMAS


def _build() -> dict[str, InvariantChecks]:
    known = set(INVARIANT_NAMES)
    stray = {c.invariant for c in _BOUNDED} - known | {lemma.invariant for lemma in LEMMAS} - known
    if stray:
        raise RuntimeError(f"checks registered for unknown invariants: {sorted(stray)}")
    return {
        name: InvariantChecks(
            name,
            tuple(lemma for lemma in LEMMAS if lemma.invariant == name),
            tuple(check for check in _BOUNDED if check.invariant == name),
        )
        for name in INVARIANT_NAMES
    }


REGISTRY: dict[str, InvariantChecks] = _build()
