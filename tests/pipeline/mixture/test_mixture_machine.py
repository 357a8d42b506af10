"""The mixture machine (``elastic_loader.testing.machines.mixture``) on the pipeline.

Runs the differential state machine that checks the four mixture invariants on what
``StreamingMixture`` does, and shows that the machine fails on a mixture that breaks one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis.stateful import run_state_machine_as_test

from elastic_loader._pipeline import _mixture_schedule
from elastic_loader.spec.invariants import InvariantViolation
from elastic_loader.testing.machines.mixture import MixtureMachine
from elastic_loader.testing.tables import TableCache

SETTINGS = settings(
    max_examples=12,
    stateful_step_count=5,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,
    phases=(Phase.explicit, Phase.reuse, Phase.generate),  # a failure prints its program unshrunk
)


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> TableCache:
    return TableCache(Path(tmp_path_factory.mktemp("mixture_machine")))


def _run(cache: TableCache) -> None:
    run_state_machine_as_test(MixtureMachine.bind(cache), settings=SETTINGS)


def test_MixtureProportionInv_MixtureExactlyOnceProp_MixtureLockstepInv_MixtureElasticDeterminismProp_hold(
    cache: TableCache,
) -> None:
    """The machine explores sessions on 1, 2 and 4 ranks, merges and one-rank saves, new weights."""
    _run(cache)


def test_the_machine_sees_a_broken_tie_order(cache: TableCache, monkeypatch: Any) -> None:
    """Origin: the machine must fail when the pipeline's schedule differs from the spec's."""
    real = _mixture_schedule.tie_order

    def shifted(sources: int, seed: int, epoch: int) -> tuple[int, ...]:
        return tuple(reversed(real(sources, seed, epoch)))

    monkeypatch.setattr(_mixture_schedule, "tie_order", shifted)
    with pytest.raises((InvariantViolation, AssertionError)):
        _run(cache)
