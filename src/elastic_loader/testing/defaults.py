"""The conformance suite's default budget, in one place.

Shared by :func:`~elastic_loader.testing.conformance.run_conformance`, the
``elastic-loader conformance`` command and the pytest plugin. This module
imports nothing, so the plugin can read it at start-up without loading
Hypothesis, LanceDB or torch.
"""

from __future__ import annotations

EXAMPLES = 60
"""Hypothesis examples per in-process machine."""
STEPS = 25
"""Steps per example of an in-process machine."""
PROCESS_EXAMPLES = 2
"""Examples of the process machine, which starts worker processes in every step."""
PROCESS_STEPS = 3
"""Steps per example of the process machine."""
SHRINK_SECONDS = 60
"""Time limit for shrinking one violation."""
MACHINES = ("row", "packed", "process")
"""The machines run by default."""
