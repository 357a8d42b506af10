"""Where a packed epoch's time goes: CPU seconds per thread, and the floor under the packer.

Usage::

    .venv/bin/python benchmarks/packing_floor.py [--docs 200000] [--clump 256] [--window 1]
        [--splits 8] [--rounds 3] [--variants full,no_copy,no_doc_ids,neither,reads] [--json PATH]

Rules:

* One process; variants run interleaved (A, B, C, ..., A, B, C, ...) on the peers' token table
  (``peer_workloads.token_spec``, built once), ``--splits`` splits, 2048-token blocks, ``LocalShuffle(clump,
  window)``; every pass is a whole epoch through ``StreamingDataset`` (one item a block), as
  ``peers.py`` runs it.
* ``full``: the loader as it is. ``no_copy``: documents are not copied into the split streams
  (``_documents.Fetched.copy_into`` does nothing: the blocks hold garbage, the control flow is unchanged).
  ``no_doc_ids``: ``doc_ids`` is one zero array reused. ``neither``: both. These are diagnostics,
  never a loader: what is left when a part of the packer costs nothing.
* ``reads``: the same documents read alone as lance.torch reads them (Lance range scans of 256
  documents in shuffled order, ``take_scan`` of 64 ranges a call), no packing: the read floor.
* Each pass records wall seconds, tokens/s, user and system CPU seconds of the process
  (``getrusage``) and CPU seconds per thread (``/proc/self/task``, sampled every 20 ms by a
  thread of its own, named ``sampler``; Python threads by their ``threading`` names, Lance's
  by their OS names). Medians over rounds go to the JSON with every round.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import resource
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import meta
import peer_workloads as pw
import workloads as w
from elastic_loader import LocalShuffle
from elastic_loader._pipeline import _documents, _packing

VARIANTS = ("full", "no_copy", "no_doc_ids", "neither", "reads")
TICK = os.sysconf("SC_CLK_TCK")


class ThreadClock:
    """CPU seconds per thread of this process, by name, sampled in the background."""

    def __init__(self) -> None:
        self._seen: dict[str, tuple[str, float]] = {}
        self._names: dict[str, str] = {}
        self._lock = threading.Lock()
        threading.Thread(target=self._loop, name="sampler", daemon=True).start()

    def _sample(self) -> None:
        for thread in threading.enumerate():
            if thread.native_id is not None:
                self._names[str(thread.native_id)] = thread.name
        for tid in os.listdir("/proc/self/task"):
            try:
                with open(f"/proc/self/task/{tid}/comm") as f:
                    name = f.read().strip()
                with open(f"/proc/self/task/{tid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue  # the thread ended
            self._seen[tid] = (self._names.get(tid, name), (int(fields[11]) + int(fields[12])) / TICK)

    def _loop(self) -> None:
        while True:
            with self._lock:
                self._sample()
            time.sleep(0.02)

    def mark(self) -> dict[str, tuple[str, float]]:
        with self._lock:
            self._sample()
            return dict(self._seen)

    def since(self, mark: dict[str, tuple[str, float]]) -> dict[str, float]:
        """CPU seconds since ``mark``, summed by thread name without its trailing number."""
        now = self.mark()
        out: collections.Counter[str] = collections.Counter()
        for tid, (name, seconds) in now.items():
            out[name.rstrip("0123456789_")] += seconds - mark.get(tid, (name, 0.0))[1]
        return {name: round(s, 3) for name, s in out.most_common() if s >= 0.005}


def _patched(variant: str) -> list[tuple[Any, str, Any]]:
    """Apply ``variant``'s no-ops; returns what to restore."""
    saved: list[tuple[Any, str, Any]] = []
    if variant in ("no_copy", "neither"):
        saved.append((_documents.Fetched, "copy_into", _documents.Fetched.copy_into))
        _documents.Fetched.copy_into = lambda self, out: None  # type: ignore[method-assign]
    if variant in ("no_doc_ids", "neither"):
        saved.append((_packing, "_doc_ids", _packing._doc_ids))
        zeros: dict[tuple[int, int], np.ndarray] = {}

        def doc_ids(starts: np.ndarray, k: int, length: int) -> np.ndarray:
            if (k, length) not in zeros:  # made once: the variant must cost nothing per chunk
                zeros[(k, length)] = np.zeros((k, length), dtype=np.int64)
            return zeros[(k, length)]

        _packing._doc_ids = doc_ids
    return saved


def reads(table: Any) -> int:
    """Every document by range scans of 256 in shuffled order, 64 ranges a call; tokens + EOS."""
    dataset = table.to_lance()
    n = dataset.count_rows()
    ranges = [(s, min(s + 256, n)) for s in range(0, n, 256)]
    random.Random(0).shuffle(ranges)
    tokens = 0
    for i in range(0, len(ranges), 64):
        part = sorted(ranges[i : i + 64])
        for batch in dataset._ds.take_scan(part, columns=["tokens"], batch_readahead=16):
            tokens += pw.tokens_with_eos(batch)
    return tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=int, default=200_000)
    parser.add_argument("--clump", type=int, default=256)
    parser.add_argument("--window", type=int, default=1)
    parser.add_argument("--splits", type=int, default=pw.NUM_SPLITS, help="num_splits (8: peers.py)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument(
        "--json",
        type=Path,
        default=meta.HERE / "packing_floor.local.json",
        help="results file (default: the git-ignored packing_floor.local.json)",
    )
    args = parser.parse_args()
    variants = args.variants.split(",")
    unknown = set(variants) - set(VARIANTS)
    if unknown:
        parser.error(f"unknown variants {sorted(unknown)}; choose from {VARIANTS}")
    spec = pw.token_spec(args.docs)
    table = w.token_table(spec)
    kind = LocalShuffle(clump=args.clump, window=args.window)
    epoch = w.packed_epoch("elastic_loader", table, spec, num_splits=args.splits, permutation=kind)
    clock = ThreadClock()
    passes: dict[str, list[dict[str, Any]]] = {v: [] for v in variants}
    for r in range(args.rounds):
        for variant in variants:
            saved = _patched(variant)
            try:
                mark, usage, t0 = clock.mark(), resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
                tokens = reads(table) if variant == "reads" else epoch()
                seconds = time.perf_counter() - t0
                after = resource.getrusage(resource.RUSAGE_SELF)
                threads = clock.since(mark)
            finally:
                for owner, name, value in saved:
                    setattr(owner, name, value)
            one = {
                "seconds": round(seconds, 3),
                "tokens_per_s": tokens / seconds,
                "user_s": round(after.ru_utime - usage.ru_utime, 3),
                "system_s": round(after.ru_stime - usage.ru_stime, 3),
                "threads_cpu_s": threads,
            }
            passes[variant].append(one)
            print(f"round {r + 1} {variant:11s} {tokens / seconds / 1e6:6.1f}M tokens/s {seconds:5.2f} s "
                  f"user {one['user_s']:.2f} sys {one['system_s']:.2f} {threads}", flush=True)  # fmt: skip
    results: dict[str, Any] = {
        "environment": meta.environment(),
        "command": " ".join(["benchmarks/packing_floor.py", *sys.argv[1:]]),
        "documents": args.docs,
        "permutation": f"LocalShuffle(clump={args.clump}, window={args.window})",
        "variants": {
            v: {
                "median_tokens_per_s": statistics.median(p["tokens_per_s"] for p in ps),
                "median_user_s": statistics.median(p["user_s"] for p in ps),
                "median_system_s": statistics.median(p["system_s"] for p in ps),
                "rounds": ps,
            }
            for v, ps in passes.items()
        },
    }
    meta.write(args.json, results)
    print(json.dumps({v: round(x["median_tokens_per_s"] / 1e6, 1) for v, x in results["variants"].items()}))


if __name__ == "__main__":
    main()
