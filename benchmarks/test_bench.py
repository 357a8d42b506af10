"""pytest-benchmark suites: ``pytest benchmarks`` (not part of ``make test``).

Each group times elastic-loader, lancedb.streaming and the raw LanceDB limit on
the same table, so ``--benchmark-group-by=group`` shows them side by side. The
ratio table with the issue's targets comes from ``benchmarks/compare.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import workloads as w

IMPLS = ("raw", "elastic_loader", "reference")


@pytest.fixture(scope="session")
def rows_table() -> Any:
    w.quiet()
    return w.rows_table()


@pytest.mark.parametrize("impl", IMPLS)
def test_rows_epoch(benchmark: Any, rows_table: Any, impl: str) -> None:
    benchmark.group = "rows: one epoch, default settings"
    run = w.raw_rows(rows_table) if impl == "raw" else w.rows_epoch(impl, rows_table)
    items = benchmark.pedantic(run, rounds=2, iterations=1)
    benchmark.extra_info["rows_per_s"] = items / benchmark.stats.stats.median
    assert items > 0


@pytest.mark.parametrize("spec", w.TOKENS, ids=[s.name for s in w.TOKENS])
@pytest.mark.parametrize("impl", IMPLS)
def test_packed_epoch(benchmark: Any, impl: str, spec: w.TokenTable) -> None:
    w.quiet()
    table = w.token_table(spec)
    benchmark.group = f"packing {spec.name}: one epoch"
    run = w.raw_tokens(table) if impl == "raw" else w.packed_epoch(impl, table, spec)
    items = benchmark.pedantic(run, rounds=2, iterations=1)
    benchmark.extra_info["tokens_per_s"] = items / benchmark.stats.stats.median
    assert items > 0


@pytest.mark.parametrize("impl", ("elastic_loader", "reference"))
def test_loader_two_workers(benchmark: Any, rows_table: Any, impl: str) -> None:
    benchmark.group = "StreamingDataLoader, 2 workers"
    items = benchmark.pedantic(w.loader_epoch(impl, rows_table), rounds=1, iterations=1)
    benchmark.extra_info["rows_per_s"] = items / benchmark.stats.stats.median
    assert items == rows_table.count_rows() // 8 * 8


@pytest.mark.parametrize("impl", ("elastic_loader", "reference"))
def test_time_to_first_row(benchmark: Any, impl: str) -> None:
    w.quiet()
    table = w.rows_table(w.TTFR_ROWS)
    benchmark.group = "time to first row, 1M rows"
    benchmark.pedantic(lambda: w.time_to_first_row(impl, table), rounds=2, iterations=1)
