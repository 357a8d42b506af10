"""What every benchmark results file records about the run: when, with what, on what.

Rules: ``environment()`` is the ``"environment"`` entry of every results file that
``compare.py``, ``peers.py`` and ``memory.py`` write. It holds the date (UTC, ISO 8601),
the git commit of the checkout (and whether it had uncommitted changes), the version of
Python and of every package a benchmark may use (``None`` when not installed; peers
included whether or not this run used them), and the machine: CPU model from
``/proc/cpuinfo``, logical cores (``os.cpu_count``) and the cores this process may run
on (its affinity), total RAM from ``/proc/meminfo``, and the platform string. It only
reads; it never fails for a missing file or package (the value is then ``None``).

``results_path(name, save)``: where a script writes its results. Without ``--save`` a
git-ignored ``benchmarks/<name>.local.json``; with it the committed ``<name>.json``.

``python benchmarks/meta.py extra NAME`` prints the requirements of pyproject's optional
dependency group ``NAME``, one per line (``make bench-peers`` installs them with
``--no-deps``); ``python benchmarks/meta.py`` prints ``environment()``.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

# Distribution names (as pip knows them), in the order the results list them.
PACKAGES = (
    "torch",
    "lancedb",
    "pylance",
    "pyarrow",
    "numpy",
    "elastic-loader",
    "litdata",
    "mosaicml-streaming",
    "torchdata",
    "lightning-utilities",
)


def versions() -> dict[str, str | None]:
    found: dict[str, str | None] = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


def _first_line_value(path: str, key: str) -> str | None:
    try:
        with open(path) as handle:
            for line in handle:
                if line.startswith(key):
                    return line.split(":", 1)[1].strip()
    except OSError:
        return None
    return None


def machine() -> dict[str, Any]:
    mem_kib = _first_line_value("/proc/meminfo", "MemTotal")
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    return {
        "cpu_model": _first_line_value("/proc/cpuinfo", "model name"),
        "logical_cores": os.cpu_count(),
        "usable_cores": affinity,
        "ram_gib": None if mem_kib is None else round(int(mem_kib.split()[0]) / 2**20, 1),
        "platform": platform.platform(),
    }


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(["git", *args], cwd=HERE, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def environment() -> dict[str, Any]:
    status = _git("status", "--porcelain", "--untracked-files=no")
    return {
        "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "git_commit": _git("rev-parse", "HEAD"),
        "git_dirty": None if status is None else bool(status),
        "versions": versions(),
        "machine": machine(),
    }


def provenance() -> dict[str, Any]:
    """The first keys of every results file: the environment and the command that made it
    (``benchmarks/SCRIPT.py`` and its arguments)."""
    return {
        "environment": environment(),
        "command": " ".join([f"benchmarks/{Path(sys.argv[0]).name}", *sys.argv[1:]]),
    }


def results_path(name: str, save: bool) -> Path:
    return HERE / (f"{name}.json" if save else f"{name}.local.json")


def write(path: Path, results: dict[str, Any]) -> None:
    path.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {path}")


def pool(runs: Sequence[tuple[str, dict[str, Any], list[float]]], what: str) -> list[float]:
    """Print each saved run's per-round ratios (``(name, its results, ratios)``) and all of them
    pooled (median, lowest, highest, rounds above 1); return the pooled ratios. ``what`` names the
    ratio (``packing_trees.py --pool``, ``peers.py --pool``)."""
    ratios: list[float] = []
    for name, saved, run_ratios in runs:
        ratios += run_ratios
        shown = ", ".join(f"{r:.2f}" for r in run_ratios)
        when = saved["environment"]["date_utc"]
        print(f"{name} ({when}): {shown}; median {statistics.median(run_ratios):.3f}")
    above = sum(r > 1 for r in ratios)
    print(
        f"pooled, {len(ratios)} rounds of {len(runs)} runs: {what} median {statistics.median(ratios):.3f} "
        f"(lowest {min(ratios):.2f}, highest {max(ratios):.2f}; {above} of {len(ratios)} above 1)"
    )
    return ratios


def saved_run(name: str, directory: Path = HERE) -> dict[str, Any]:
    """The saved results ``directory/NAME.json``."""
    result: dict[str, Any] = json.loads((directory / f"{name}.json").read_text())
    return result


def extra(name: str) -> list[str]:
    import tomllib  # Python 3.11+, like the Makefile's venv

    with open(HERE.parent / "pyproject.toml", "rb") as handle:
        return list(tomllib.load(handle)["project"]["optional-dependencies"][name])


if __name__ == "__main__":
    if sys.argv[1:2] == ["extra"]:
        print("\n".join(extra(sys.argv[2])))
    else:
        print(json.dumps(environment(), indent=2))
