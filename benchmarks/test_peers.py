"""pytest-benchmark suite of the peer comparison: ``pytest benchmarks/test_peers.py`` (not in ``make test``).

The same loaders and data as ``benchmarks/peers.py`` (``peer_workloads``), one test per
loader, grouped so ``--benchmark-group-by=group`` puts them side by side. A loader whose
package is missing is skipped (``make bench-install`` installs them). Row-mode tests
record the shuffle-quality measures in ``extra_info`` and check that the pass delivered
every row exactly once. Sizes: ``ELASTIC_LOADER_BENCH_PEER_ROWS`` (default 2,000,000)
and ``ELASTIC_LOADER_BENCH_PEER_DOCS`` (default 200,000). Unlike ``peers.py`` the rounds
are not interleaved across loaders; use ``peers.py`` for ratios.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))

import peer_workloads as pw
import quality
import workloads as w

ROWS = int(os.environ.get("ELASTIC_LOADER_BENCH_PEER_ROWS", 2_000_000))
DOCS = int(os.environ.get("ELASTIC_LOADER_BENCH_PEER_DOCS", 200_000))


def _require(loader: pw.Loader) -> None:
    if loader.requires is not None and not pw.installed(loader.requires):
        pytest.skip(f"{loader.requires} is not installed")


@pytest.fixture(scope="session")
def peer_rows_table() -> Any:
    w.quiet()
    return w.rows_table(ROWS)


@pytest.fixture(scope="session")
def peer_token_table() -> tuple[Any, w.TokenTable]:
    w.quiet()
    spec = pw.token_spec(DOCS)
    return w.token_table(spec), spec


@pytest.mark.parametrize("loader", pw.ROW_LOADERS, ids=[x.name for x in pw.ROW_LOADERS])
def test_peer_rows(benchmark: Any, peer_rows_table: Any, loader: pw.Loader) -> None:
    _require(loader)
    benchmark.group = f"peers, row mode, {ROWS:,} rows"
    run = loader.make(peer_rows_table)
    ids = benchmark.pedantic(run, rounds=2, iterations=1)
    benchmark.extra_info["rows_per_s"] = len(ids) / benchmark.stats.stats.median
    benchmark.extra_info.update(quality.summary(ids, ROWS))
    assert len(ids) == ROWS
    assert len(np.unique(ids)) == ROWS


@pytest.mark.parametrize("loader", pw.TOKEN_LOADERS, ids=[x.name for x in pw.TOKEN_LOADERS])
def test_peer_packing(benchmark: Any, peer_token_table: tuple[Any, w.TokenTable], loader: pw.Loader) -> None:
    _require(loader)
    table, spec = peer_token_table
    benchmark.group = f"peers, packing, {DOCS:,} documents, L={spec.pack}"
    tokens = benchmark.pedantic(loader.make(table, spec), rounds=2, iterations=1)
    benchmark.extra_info["tokens_per_s"] = tokens / benchmark.stats.stats.median
    assert tokens > 0
    if loader.name not in ("raw_take_16k", "scan_arrow"):  # the raw reads count tokens, not blocks
        assert tokens % spec.pack == 0
