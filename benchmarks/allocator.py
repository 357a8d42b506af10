"""What an environment setting does to an epoch: the same passes with and without it (glibc's malloc
settings by default; also range scans turned off).

Usage::

    .venv/bin/python benchmarks/allocator.py [--rounds 5] [--docs 200000]
        [--kinds builder,local_8_64] [--items packing] [--variants default,tuned] [--before DIR]
        [--name NAME] [--save]

Every pass is one ``permutation_read.py --one KIND/ITEM`` in a new Python process, once per
variant of :data:`VARIANTS`: ``default`` (the environment as it is), ``tuned`` (:data:`TUNED`
added), ``top_pad`` (only ``MALLOC_TOP_PAD_``: a trimmed heap keeps 64 MiB), ``one_arena``
(``MALLOC_ARENA_MAX=1``: every thread allocates from the main heap), ``take``
(``ELASTIC_LOADER_RANGE_SCANS=0``: reads by storage position never use range
scans, docs/PIPELINE.md), ``before`` (``PYTHONPATH=DIR`` of ``--before DIR``: the package from
another source tree, for example ``git archive``'d from an earlier commit: a change measured
before and after in one run); the rounds interleave kinds and variants, so the variants of a kind run
minutes apart on the same machine state. glibc's settings must be set before the process starts
(glibc reads them once), which is why they are a user's choice and not something the package
sets: they change every allocation of the process, torch's and LanceDB's included (the package
only raises glibc's dynamic mmap threshold, once, by freeing one block: docs/PIPELINE.md).

Why they matter here: a packed epoch allocates its output (every block's ``input_ids`` and
``doc_ids``, 16 bytes a token) and LanceDB its read buffers afresh. With glibc's defaults a
freed buffer above the (adaptive) mmap threshold goes back to the kernel, and the top of a heap
is trimmed, so the next buffer of that size faults its pages in again; on a VM a first-touch
page fault is expensive. ``TUNED`` keeps buffers up to 64 MiB on the heap and the heap untrimmed.

Results: medians per kind and variant (items per second and each pass's peak resident set),
``VARIANT / default`` per kind, and each variant's ratio of every kind to ``builder`` (the
target's measure), to ``benchmarks/NAME.json`` with ``--save`` (else ``NAME.local.json``; NAME
is ``allocator`` unless given), with ``meta.provenance()``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

TUNED = {
    "MALLOC_MMAP_THRESHOLD_": str(64 << 20),
    "MALLOC_TRIM_THRESHOLD_": str(1 << 30),
    "MALLOC_TOP_PAD_": str(64 << 20),
}
"""glibc tunables (``mallopt`` names with a trailing underscore): allocations below 64 MiB come
from the heap, the heap is trimmed only above 1 GiB free, and it grows 64 MiB at a time."""

VARIANTS: dict[str, dict[str, str]] = {
    "default": {},
    "tuned": TUNED,
    "top_pad": {"MALLOC_TOP_PAD_": str(64 << 20)},
    "one_arena": {"MALLOC_ARENA_MAX": "1"},
    "take": {"ELASTIC_LOADER_RANGE_SCANS": "0"},
    "before": {},
}
"""Each variant's additions to the environment (``before``: ``PYTHONPATH`` set by ``--before``)."""


def one_pass(kind: str, item: str, docs: int, rows: int, variant: str) -> tuple[float, int]:
    """Items per second of one pass in a new process, and that process's peak resident set (bytes,
    from ``wait4``: table set-up included, the same in every variant)."""
    env = {**os.environ, **VARIANTS[variant]}
    command = [
        sys.executable,
        str(HERE / "permutation_read.py"),
        "--one",
        f"{kind}/{item}",
        "--docs",
        str(docs),
        "--rows",
        str(rows),
    ]
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    assert child.stdout is not None
    out = child.stdout.read()
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait again
    if child.returncode != 0:
        raise subprocess.CalledProcessError(child.returncode, command, out)
    rate: float = json.loads(out.strip().splitlines()[-1])["rate"]
    return rate, usage.ru_maxrss * 1024


def summarise(
    rates: dict[str, dict[str, list[float]]],
    peaks: dict[str, dict[str, list[int]]],
    kinds: list[str],
    variants: list[str],
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kind in kinds:
        median = {v: statistics.median(rates[kind][v]) for v in variants}
        out[kind] = {f"{v}_peak_rss_mib": round(statistics.median(peaks[kind][v]) / 2**20) for v in variants}
        out[kind].update({f"{v}_per_s": round(median[v]) for v in variants})
        for v in variants:
            if v != "default" and "default" in variants:
                out[kind][f"{v}_vs_default"] = round(median[v] / median["default"], 3)
        out[kind]["rounds"] = {v: [round(r) for r in rates[kind][v]] for v in variants}
    if "builder" in kinds:
        for variant in variants:
            base = rates["builder"][variant]
            for kind in kinds:
                per_round = [a / b for a, b in zip(rates[kind][variant], base)]
                out[kind][f"{variant}_vs_builder"] = round(statistics.median(per_round), 3)
                out[kind][f"{variant}_round_ratios_vs_builder"] = [round(r, 2) for r in per_round]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--docs", type=int, default=200_000)
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--kinds", default="builder,local_8_64")
    parser.add_argument("--items", default="packing", help="one of permutation_read.py's items")
    parser.add_argument("--variants", default="default,tuned", help=f"of {', '.join(VARIANTS)}")
    parser.add_argument("--before", metavar="DIR", help="the source tree of the 'before' variant")
    parser.add_argument("--name", default="allocator", help="results file name (without .json)")
    parser.add_argument("--save", action="store_true")
    args = parser.parse_args()
    sys.path.insert(0, str(HERE))
    import meta

    kinds, variants = args.kinds.split(","), args.variants.split(",")
    if ("before" in variants) != bool(args.before):
        parser.error("the 'before' variant and --before DIR go together")
    if args.before:
        VARIANTS["before"] = {"PYTHONPATH": str(Path(args.before).resolve())}
    results: dict[str, Any] = {**meta.provenance(), "variants": {v: VARIANTS[v] for v in variants}}
    rates: dict[str, dict[str, list[float]]] = {k: {v: [] for v in variants} for k in kinds}
    peaks: dict[str, dict[str, list[int]]] = {k: {v: [] for v in variants} for k in kinds}
    for round_ in range(args.rounds):
        for kind in kinds:
            for variant in variants:
                rate, peak = one_pass(kind, args.items, args.docs, args.rows, variant)
                rates[kind][variant].append(rate)
                peaks[kind][variant].append(peak)
                print(
                    f"round {round_ + 1} {kind}/{args.items} {variant}: {rate:,.0f}/s,"
                    f" peak RSS {peak / 2**20:,.0f} MiB",
                    flush=True,
                )
        # every finished round is kept: an interrupted run still leaves its results
        results.update(rounds_done=round_ + 1, item=args.items, docs=args.docs, rows=args.rows)
        results["results"] = summarise(rates, peaks, kinds, variants)
        meta.write(meta.results_path(args.name, args.save), results)
    print(json.dumps(results["results"], indent=2))


if __name__ == "__main__":
    main()
