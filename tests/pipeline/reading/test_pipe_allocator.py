"""The first read pipeline of a process raises glibc's mmap threshold (``_pipeline/_allocator``).

Each check runs in a new process and asks glibc (``mallinfo2``) whether a fresh 20 MiB block is a
mapping of its own (below the threshold it comes from the heap). The block is never freed: freeing
a mapped block would itself move the threshold.
"""

from __future__ import annotations

import ctypes
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(
    platform.libc_ver()[0] != "glibc" or not hasattr(ctypes.CDLL(None), "mallinfo2"),
    reason="glibc's mmap threshold (mallinfo2 needs glibc 2.33)",
)

PROBE = """
import ctypes, sys

class Info(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
        "keepcost")]

libc = ctypes.CDLL(None)
libc.mallinfo2.restype = Info
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]

def mapped(nbytes):
    before = libc.mallinfo2().hblkhd
    assert libc.malloc(nbytes)
    return libc.mallinfo2().hblkhd - before >= nbytes

mode, where = sys.argv[1], sys.argv[2]
import lancedb
import pyarrow as pa
from elastic_loader import StreamingDataset
from elastic_loader._pipeline._allocator import raise_mmap_threshold

if mode == "nudge":
    assert raise_mmap_threshold() and not raise_mmap_threshold()  # once per process
elif mode == "pipeline":
    table = lancedb.connect(where).create_table("t", pa.table({"id": list(range(64))}))
    rows = StreamingDataset(table, num_splits=2, shuffle_seed=0)
    assert sorted(row["id"] for row in rows) == list(range(64))
print("mapped" if mapped(20 * 2**20) else "heap")
"""


def _probe(mode: str, where: Path, **env: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, mode, str(where)],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.split()[-1]


def test_a_new_process_maps_a_20_mib_block(tmp_path: Path) -> None:
    assert _probe("none", tmp_path) == "mapped"  # the premise the other checks rest on


def test_the_nudge_raises_the_threshold_once(tmp_path: Path) -> None:
    assert _probe("nudge", tmp_path) == "heap"


def test_a_read_pipeline_raises_it(tmp_path: Path) -> None:
    assert _probe("pipeline", tmp_path) == "heap"


def test_the_environment_switches_it_off(tmp_path: Path) -> None:
    assert _probe("pipeline", tmp_path, ELASTIC_LOADER_MALLOC_NUDGE="0") == "mapped"
