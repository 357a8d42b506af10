"""Show that the bounded checks catch bugs: break the model in a scratch copy and rerun them.

``python -m proofs.mutations [--full] [--only NAME]`` copies ``src/`` to a
temporary directory, applies one textual mutation at a time (each must match
exactly once), runs ``python -m proofs --bounded-only`` against the mutated
copy (``PYTHONPATH=<copy>/src``) and prints a Markdown table of the checks
that failed. The repository itself is never modified.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from elastic_loader.spec.invariants import INVARIANT_NAMES

REPO = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Mutation:
    """One deliberate bug: ``old`` becomes ``new`` in ``path`` (under ``src/elastic_loader/spec``)."""

    name: str
    path: str
    function: str
    old: str
    new: str


MUTATIONS: tuple[Mutation, ...] = (
    Mutation(
        "owned-off-by-one",
        "topology.py",
        "owned_splits",
        "return mine[start : start + per_worker]",
        "return mine[start : start + per_worker + 1]",
    ),
    Mutation(
        "join-min",
        "checkpoint.py",
        "join_row",
        "tuple(map(max, a.samples, b.samples))",
        "tuple(map(min, a.samples, b.samples))",
    ),
    Mutation(
        "catch-up-by-split",
        "rows.py",
        "iterate_rows (catch-up)",
        "count, s = heapq.heappop(lagging)",
        "count, s = lagging.pop(min(range(len(lagging)), key=lambda i: lagging[i][1]))",
    ),
    Mutation(
        "positions-ignore-skips",
        "rows.py",
        "iterate_rows (take)",
        "positions[s] = p + 1",
        "positions[s] = positions[s] + 1",
    ),
    Mutation(
        "cycle-yields-early",
        "rows.py",
        "iterate_rows (cycles)",
        "cycle.append((s, nxt.position))",
        "take(s, nxt.position)",
    ),
    Mutation(
        "doc-ids-off-by-one",
        "packing.py",
        "doc_ids_of",
        "sum(1 for s in starts if 0 < s <= k)",
        "sum(1 for s in starts if 0 < s < k)",
    ),
    Mutation(
        "emit-no-padding",
        "packing.py",
        "_Packer.emit",
        "ids = tuple(tokens[:length]) + (self.config.pad_id,) * (length - real)",
        "ids = tuple(tokens[:length])",
    ),
    Mutation(
        "budget-one-extra",
        "packing.py",
        "iterate_packed (loop)",
        "while packer.emitted[owned[0]] < budget:",
        "while packer.emitted[owned[0]] <= budget:",
    ),
    Mutation(
        "fill-one-more-doc",
        "packing.py",
        "_Packer.fill",
        "while len(tokens) < length:",
        "while len(tokens) <= length:",
    ),
    Mutation(
        "commit-replaces",
        "checkpoint.py",
        "commit_row",
        "return join_row(parent, parse_row(st, config.num_splits))",
        "return parse_row(st, config.num_splits)",
    ),
    Mutation(
        "batches-worker-major",
        "loader.py",
        "order_batches",
        "key=lambda b: (b[1], b[0])",
        "key=lambda b: (b[0], b[1])",
    ),
    Mutation(
        "packed-ties-to-later",
        "checkpoint.py",
        "join_packed",
        "owner = b if (b.emitted[s], b.consumed[s]) > (a.emitted[s], a.consumed[s]) else a",
        "owner = b if (b.emitted[s], b.consumed[s]) >= (a.emitted[s], a.consumed[s]) else a",
    ),
    Mutation(
        "auto-budget-floor-1",
        "packing.py",
        "estimate_blocks_per_epoch",
        "return max(num_splits, blocks - blocks % num_splits)",
        "return max(1, blocks - blocks % num_splits)",
    ),
    Mutation(
        "cut-ceil",
        "topology.py",
        "cut_splits",
        "m = len(order) // num_splits\n    require(m >= 1",
        "m = -(-len(order) // num_splits)\n    require(m >= 1",
    ),
    Mutation(
        "load-drops-positions",
        "checkpoint.py",
        "_parse_row",
        'positions_raw = state.get("positions_consumed_per_split")',
        "positions_raw = None",
    ),
    Mutation(
        "walk-stops-early",
        "computed.py",
        "cycle_walk",
        "while y >= perm.num_rows:",
        "while y > perm.num_rows:",
    ),
    Mutation(
        "decrypt-forward-order",
        "computed.py",
        "feistel_decrypt",
        "for key in reversed(keys):",
        "for key in keys:",
    ),
    Mutation(
        "locate-keeps-dropped",
        "computed.py",
        "computed_locate",
        "if i < perm.num_splits * m else None",
        "if i <= perm.num_splits * m else None",
    ),
    # save protocols (saved.py, inference.py, schedule.py)
    Mutation(
        "merge-takes-inferred",
        "saved.py",
        "merge_saved",
        "reporters = [st for st in states if s in st.reported]",
        "reporters = list(states)",
    ),
    Mutation(
        "cursor-ignored",
        "saved.py",
        "Cursor.rotation",
        "return self.next_roles[rank]",
        "return 0",
    ),
    Mutation(
        "counts-tie-to-last-split",
        "schedule.py",
        "canonical_counts",
        "    for c in counts:\n        value = max(c, low)\n        if rest and c <= low:\n"
        "            value += 1\n            rest -= 1\n        out.append(value)\n    return tuple(out)",
        "    for c in reversed(counts):\n        value = max(c, low)\n        if rest and c <= low:\n"
        "            value += 1\n            rest -= 1\n        out.append(value)\n"
        "    return tuple(reversed(out))",
    ),
    Mutation(
        "skipping-rows-inferred",
        "inference.py",
        "_unknown_blocks",
        "if block & start.unknown or (skipping and moved):",
        "if block & start.unknown:",
    ),
    Mutation(
        "digest-not-checked",
        "saved.py",
        "load_saved",
        "    _check_digest(st, extra)\n",
        "    pass  # the digest is not checked\n",
    ),
)


def failing_checks(output: str) -> list[str]:
    """Invariant names with a FAILED line in ``python -m proofs`` output, in order."""
    failed: list[str] = []
    current = ""
    for line in output.splitlines():
        if line in INVARIANT_NAMES:
            current = line
        elif line.strip().startswith("FAILED") and current not in failed:
            failed.append(current)
    return failed


def run_mutation(
    mutation: Mutation, quick: bool, invariants: Sequence[str] = ()
) -> tuple[list[str], str, float]:
    """Apply ``mutation`` to a scratch copy of ``src`` and run the bounded checks (of ``invariants``, or
    all) against it; return the failing invariants, the output and the run time."""
    with tempfile.TemporaryDirectory(prefix="elastic-loader-mutant-") as tmp:
        src = Path(tmp) / "src"
        shutil.copytree(REPO / "src" / "elastic_loader", src / "elastic_loader")
        target = src / "elastic_loader" / "spec" / mutation.path
        text = target.read_text()
        if text.count(mutation.old) != 1:
            raise SystemExit(f"{mutation.name}: the text to replace occurs {text.count(mutation.old)} times")
        target.write_text(text.replace(mutation.old, mutation.new))
        env = dict(os.environ, PYTHONPATH=f"{src}{os.pathsep}{REPO}")
        command = [sys.executable, "-m", "proofs", "--bounded-only", "--no-progress"]
        if quick:
            command.append("--quick")
        for name in invariants:
            command += ["--only", name]
        start = time.perf_counter()
        done = subprocess.run(command, cwd=tmp, env=env, capture_output=True, text=True, check=False)
        elapsed = time.perf_counter() - start
        imported = subprocess.run(
            [sys.executable, "-c", "import elastic_loader; print(elastic_loader.__file__)"],
            cwd=tmp,
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        if not imported.startswith(str(src)):
            raise SystemExit(f"the mutated copy was not imported ({imported})")
        return failing_checks(done.stdout), done.stdout, elapsed


def main(argv: Sequence[str] | None = None) -> int:
    """Run every mutation (or the ``--only`` ones) and print the table; 1 if a mutation survived."""
    parser = argparse.ArgumentParser(prog="python -m proofs.mutations")
    parser.add_argument("--full", action="store_true", help="full bounds instead of --quick")
    parser.add_argument("--only", action="append", default=[], metavar="NAME")
    parser.add_argument("--show", action="store_true", help="print the first failure of each mutant")
    args = parser.parse_args(argv)
    chosen = [m for m in MUTATIONS if not args.only or m.name in args.only]
    print("| mutation | function | change | failing bounded checks |")
    print("|---|---|---|---|")
    survivors = 0
    for mutation in chosen:
        failed, output, _ = run_mutation(mutation, quick=not args.full)
        survivors += not failed
        change = f"`{mutation.old.splitlines()[0]}` -> `{mutation.new.splitlines()[0]}`"
        verdict = ", ".join(failed) if failed else "none (survived)"
        print(
            f"| {mutation.name} | `{mutation.function}` ({mutation.path}) | {change} | {verdict} |",
            flush=True,
        )
        if args.show and failed:
            first = next(i for i, line in enumerate(output.splitlines()) if line.strip().startswith("FAILED"))
            print(
                "\n".join("    " + line for line in output.splitlines()[first : first + 3]), file=sys.stderr
            )
    return 1 if survivors else 0


if __name__ == "__main__":
    raise SystemExit(main())
