"""Inject timing nondeterminism into the pipeline, reproducibly (tests only).

The pipeline has two stages that run in pool threads: reading a unit from
storage and transforming it. Their completion order is the pipeline's only
source of nondeterminism; whatever it is, what the dataset yields and what its
checkpoints say must not change. A timing hook lets a test delay each stage of
each unit by an amount chosen from a seed, so Hypothesis can draw the seed,
explore interleavings, and replay a failure with the same delays::

    from elastic_loader.testing.timing import SeededDelays, inject_timing

    inject_timing(dataset, SeededDelays(seed=7, max_delay=0.002))

The hook travels with the dataset to DataLoader worker processes (it is
picklable). Implementations without the hook are left alone
(:func:`inject_timing` returns ``False``).
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass

STAGES = ("read", "transform")


@dataclass(frozen=True)
class SeededDelays:
    """Sleep before each stage of each unit for a duration drawn from ``(seed, stage, unit)``.

    Attributes:
        seed: chooses the delays; the same seed gives the same delays.
        max_delay: longest delay in seconds.
        probability: share of (stage, unit) pairs that are delayed at all.
    """

    seed: int
    max_delay: float = 0.002
    probability: float = 0.5

    def delay(self, stage: str, unit: int) -> float:
        """The delay of ``stage`` of unit number ``unit`` (0 when not delayed)."""
        rng = random.Random(f"{self.seed}/{stage}/{unit}")
        return rng.random() * self.max_delay if rng.random() < self.probability else 0.0

    def __call__(self, stage: str, unit: int) -> None:
        seconds = self.delay(stage, unit)
        if seconds:
            time.sleep(seconds)


def inject_timing(dataset: object, hook: SeededDelays | None) -> bool:
    """Install ``hook`` (``None`` removes it) on an elastic-loader dataset.

    Returns:
        ``True`` when the dataset supports timing hooks, ``False`` otherwise
        (for example ``lancedb.streaming``), in which case nothing changes.
    """
    if not hasattr(dataset, "_timing_hook"):
        return False
    dataset._timing_hook = hook
    return True
