"""The conformance suite's default budget and its shared options, in one place.

Shared by :func:`~elastic_loader.testing.conformance.run_conformance`, the
``elastic-loader conformance`` command and the pytest plugin: the command
declares every option of :data:`OPTIONS` as ``--NAME``, the plugin those marked
``plugin`` as ``--elastic-loader-NAME``, with the same defaults and help. This
module imports only :mod:`typing`, so the plugin can read it at start-up
without loading Hypothesis, LanceDB or torch.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

EXAMPLES = 60
"""Hypothesis examples per in-process machine."""
STEPS = 25
"""Steps per example of an in-process machine."""
PROCESS_EXAMPLES = 2
"""Examples of the process machine, which starts worker processes in every step."""
PROCESS_STEPS = 3
"""Steps per example of the process machine."""
MIXTURE_EXAMPLES = 12
"""Examples of the mixture machine (each step runs every rank of a three-table mixture)."""
MIXTURE_STEPS = 5
"""Steps per example of the mixture machine."""
SHRINK_SECONDS = 60
"""Time limit for shrinking one violation."""
MACHINES = ("row", "packed", "process", "mixture")
"""The machines run by default (``mixture`` only on implementations that have mixtures)."""


class Option(NamedTuple):
    """One option of a conformance run, as the command and the plugin declare it."""

    name: str
    """``examples`` is ``--examples`` (command) and ``--elastic-loader-examples`` (plugin)."""
    kind: Literal["machines", "count", "int", "flag"]
    """``machines``: a comma-separated list; ``count``: a positive int; ``flag``: on when given."""
    default: int | None
    metavar: str | None
    help: str
    plugin: bool = True
    """Whether the pytest plugin has it too."""


OPTIONS: tuple[Option, ...] = (
    Option(
        "machines",
        "machines",
        None,
        "LIST",
        f"machines to run, comma-separated (default: {','.join(MACHINES)})",
    ),
    Option("examples", "count", EXAMPLES, "N", f"examples per in-process machine ({EXAMPLES})"),
    Option("steps", "count", STEPS, "N", f"steps per example ({STEPS})"),
    Option(
        "process-examples",
        "count",
        PROCESS_EXAMPLES,
        "N",
        f"examples of the process machine, which starts worker processes in every step ({PROCESS_EXAMPLES})",
    ),
    Option(
        "process-steps",
        "count",
        PROCESS_STEPS,
        "N",
        f"steps per process example ({PROCESS_STEPS})",
        plugin=False,
    ),
    Option("seed", "int", None, "N", "Hypothesis seed (default: derandomized)"),
    Option("no-shrink", "flag", None, None, "report violations without shrinking them"),
    Option(
        "shrink-seconds",
        "count",
        SHRINK_SECONDS,
        "S",
        f"stop shrinking one violation after S seconds ({SHRINK_SECONDS})",
    ),
    Option("no-vectors", "flag", None, None, "skip the JSON vectors"),
)
"""The options of a run, in the order ``--help`` lists them."""
