"""The benchmark harness times loaders, not imports: a packed pass of elastic-loader, made by
``benchmarks/workloads.packed_epoch``, has its package (and torch) imported before ``run()`` is
called, as every peer's loader has (a fresh process per run would otherwise time a second of imports
for elastic-loader only)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

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
