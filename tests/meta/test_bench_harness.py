"""The benchmark harness times loaders, not imports: a packed pass of elastic-loader, made by
``benchmarks/workloads.packed_epoch``, has its package (and torch) imported before ``run()`` is
called, as every peer's loader has (a fresh process per run would otherwise time a second of imports
for elastic-loader only)."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"

PROBE = """
import sys
import workloads as w
spec = w.TokenTable("docs_probe", 40, 4, 12, 16)
table = w.token_table(spec)
assert "torch" not in sys.modules, "the table alone imports torch: the check below proves nothing"
run = w.packed_epoch("elastic_loader", table, spec, num_splits=2)
assert "torch" in sys.modules and "elastic_loader._pipeline.dataset" in sys.modules
assert run() > 0
"""


def test_packed_epoch_imports_before_the_clock(tmp_path: Path) -> None:
    env = {**os.environ, "ELASTIC_LOADER_BENCH_DATA": str(tmp_path), "PYTHONPATH": str(BENCH)}
    done = subprocess.run([sys.executable, "-c", PROBE], env=env, cwd=BENCH, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]


def _bench_module(name: str) -> ModuleType:
    """A module of ``benchmarks/``, imported with that directory on ``sys.path`` (as its scripts run)."""
    sys.path.insert(0, str(BENCH))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(BENCH))


def test_pooled_ratios_are_every_rounds_ratio_to_its_runs_first_case(tmp_path: Path) -> None:
    packing_trees = _bench_module("packing_trees")
    runs = {
        "a": {"old": [10, 20], "new": [19, 42]},
        "b": {"old": [30, 10, 40], "new": [60, 25, 70]},
    }
    for name, cases in runs.items():
        saved = {
            "environment": {"date_utc": "2026-12-07T00:00:00+00:00"},
            "first": "old",
            "cases": {label: {"rounds": rounds} for label, rounds in cases.items()},
        }
        (tmp_path / f"{name}.json").write_text(json.dumps(saved))
    ratios = packing_trees.pooled("new", ["a", "b"], tmp_path)
    assert ratios == [1.9, 2.1, 2.0, 2.5, 1.75]


def test_packing_trees_orders_name_the_read_order_and_the_batches() -> None:
    packing_trees = _bench_module("packing_trees")
    assert packing_trees.order_options("default") == ("default", {"num_splits": packing_trees.SPLITS})
    assert packing_trees.order_options("8_256") == ("8_256", {"num_splits": packing_trees.SPLITS})
    batches = {"num_splits": 1, "batch_size": 64, "batch_format": "torch"}
    assert packing_trees.order_options("1024_4096_b64") == ("1024_4096", batches)
    assert packing_trees.order_options("default_b64") == ("default", batches)
    for bad in ("8_256_b", "8_256_bx", "8_256_b0"):
        with pytest.raises(ValueError, match="batch suffix"):
            packing_trees.order_options(bad)


def test_peers_pooled_ratios_are_every_rounds_ratio_of_two_loaders(tmp_path: Path) -> None:
    peers = _bench_module("peers")

    def save(name: str, ours: list[float], theirs: list[float]) -> None:
        loaders = {"ours": {"rounds_items_per_s": ours}, "theirs": {"rounds_items_per_s": theirs}}
        saved = {"environment": {"date_utc": "2026-12-07T00:00:00+00:00"}, "packing": {"loaders": loaders}}
        (tmp_path / f"{name}.json").write_text(json.dumps(saved))

    save("a", [10, 30], [5, 40])
    save("b", [9], [10])
    assert peers.pooled("packing", "ours", "theirs", ["a", "b"], tmp_path) == [2.0, 0.75, 0.9]
    save("c", [1, 2], [1])
    with pytest.raises(ValueError):  # rounds that do not pair up are refused, not cut short
        peers.pooled("packing", "ours", "theirs", ["c"], tmp_path)
