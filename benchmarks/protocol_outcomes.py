"""How users save and resume, measured on elastic-loader and on ``lancedb.streaming`` side by side.

Every scenario runs one epoch of a real LanceDB table through save and resume steps the way a user
or a framework does them, and counts, over the whole epoch, the rows (or blocks) delivered twice
(*repeated*) and never (*lost*), or the error a step raised (*refused*). Ranks of a job are datasets
with the same settings and their own ``rank``; lockstep means every rank takes the same number of
batches. The table this prints is the one in docs/CHECKPOINTS.md.

    .venv/bin/python benchmarks/protocol_outcomes.py [--json benchmarks/protocol_outcomes.json]
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import logging
import tempfile
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import lancedb
import pyarrow as pa

ROWS, SPLITS = 240, 12
PACKING = {"columns": ["tokens"], "pack_sequences": 6, "eos_id": -1, "pad_id": -2, "blocks_per_epoch": 96}


@dataclass(frozen=True)
class Impl:
    name: str
    dataset: Any
    loader: Any
    merge: Callable[[list[dict[str, Any]]], dict[str, Any]]


def implementations() -> list[Impl]:
    import lancedb.streaming as ref

    import elastic_loader as ours

    return [
        Impl("elastic-loader", ours.StreamingDataset, ours.StreamingDataLoader, ours.merge_state_dicts),
        Impl(
            "lancedb.streaming",
            ref.StreamingDataset,
            ref.StreamingDataLoader,
            ref.StreamingDataset.merge_state_dicts,
        ),
    ]


def make_table(root: str, name: str) -> Any:
    tokens = [[i * 10 + k for k in range(1 + i % 5)] for i in range(ROWS)]
    data = pa.table(
        {"id": pa.array(range(ROWS), pa.int64()), "tokens": pa.array(tokens, pa.list_(pa.int64()))}
    )
    return lancedb.connect(root).create_table(name, data, mode="overwrite")


def key(item: Any, packed: bool) -> Any:
    if packed:
        return tuple(item["input_ids"].tolist())
    return int(item["id"])


class Job:
    """One implementation, one table, one mode; ranks built on demand."""

    def __init__(self, impl: Impl, table: Any, packed: bool, **kwargs: Any) -> None:
        self.impl, self.table, self.packed, self.kwargs = impl, table, packed, kwargs

    def dataset(self, rank: int, world_size: int) -> Any:
        extra = PACKING if self.packed else {"columns": ["id"]}
        return self.impl.dataset(
            self.table,
            num_splits=SPLITS,
            shuffle_seed=5,
            rank=rank,
            world_size=world_size,
            **extra,
            **self.kwargs,
        )

    def take(self, ds: Any, batches: int, batch: int = 4, workers: int = 0) -> list[Any]:
        loader = self.impl.loader(ds, batch_size=batch, num_workers=workers)
        it: Iterator[Any] = iter(loader)
        out: list[Any] = []
        for b in itertools.islice(it, batches):
            rows = b["input_ids"] if self.packed else b["id"]
            out.extend(tuple(r.tolist()) if self.packed else int(r) for r in rows)
        with contextlib.suppress(Exception):
            it.close()  # type: ignore[attr-defined]
        del it, loader
        return out

    def rest(self, ds: Any) -> list[Any]:
        return [key(item, self.packed) for item in ds]

    def epoch(self) -> Counter[Any]:
        return Counter(self.rest(self.dataset(0, 1)))


def outcome(job: Job, delivered: list[Any], want: Counter[Any] | None = None) -> str:
    want = job.epoch() if want is None else want
    got = Counter(delivered)
    repeated = sum((got - want).values())
    lost = sum((want - got).values())
    return "exact" if repeated == lost == 0 else f"{repeated} repeated, {lost} lost"


def session(
    job: Job, start: dict[str, Any] | None, world_size: int, batches: int, workers: int = 0
) -> tuple[list[Any], list[Any]]:
    """Every rank loads ``start`` and takes ``batches`` batches; the ranks' datasets are returned."""
    delivered, ranks = [], []
    for r in range(world_size):
        ds = job.dataset(r, world_size)
        if start is not None:
            ds.load_state_dict(start)
        delivered += job.take(ds, batches, workers=workers)
        ranks.append(ds)
    return delivered, ranks


def finish(job: Job, state: dict[str, Any], world_size: int) -> list[Any]:
    out = []
    for r in range(world_size):
        ds = job.dataset(r, world_size)
        ds.load_state_dict(state)
        out += job.rest(ds)
    return out


def chain(job: Job, sizes: list[int], workers: int = 0) -> str:
    delivered: list[Any] = []
    state = None
    for w in sizes[:-1]:
        got, ranks = session(job, state, w, 3, workers)
        delivered += got
        state = ranks[0].state_dict()  # rank 0 alone saves
    return outcome(job, delivered + finish(job, state, sizes[-1]))  # type: ignore[arg-type]


def async_merge_of_rank0(job: Job) -> str:
    r0, r1 = job.dataset(0, 2), job.dataset(1, 2)
    delivered = job.take(r0, 7) + job.take(r1, 2)
    merged = job.impl.merge([r0.state_dict()])
    return outcome(job, delivered + finish(job, merged, 1))


def table_change(job: Job, change: str) -> str:
    """The epoch as it was when it started, against what a save and a resume across a change give."""
    want = job.epoch()
    ds = job.dataset(0, 1)
    delivered = job.take(ds, 9)
    state = ds.state_dict()
    if change == "append":
        job.table.add(pa.table({"id": pa.array(range(1000, 1040), pa.int64()), "tokens": [[1]] * 40}))
    elif change == "delete":
        job.table.delete("id < 12")
    else:
        job.table.update(where="id >= 200 AND id < 210", values={"id": -1})
    return outcome(job, delivered + finish(job, state, 1), want)


def readme_snippet(job: Job) -> str:
    """The README's 'Use it' loop: 2 workers, batch 8, state_dict() at step 0."""
    ds = job.dataset(0, 1)
    loader = job.impl.loader(ds, batch_size=8, num_workers=2)
    delivered: list[Any] = []
    state = None
    for step, batch in enumerate(loader):
        rows = batch["input_ids"] if job.packed else batch["id"]
        delivered.extend(tuple(r.tolist()) if job.packed else int(r) for r in rows)
        if step == 0:
            state = ds.state_dict()
        if step == 2:
            break
    delivered = delivered[: 8 * 1]
    assert state is not None
    return outcome(job, delivered + finish(job, state, 1))


SCENARIOS: list[tuple[str, bool, Callable[[Job], str]]] = [
    (
        "2 ranks in lockstep, rank 0 alone saves `ds.state_dict()`, both ranks load it",
        False,
        lambda j: chain(j, [2, 2]),
    ),
    ("the same with 2 DataLoader workers per rank", False, lambda j: chain(j, [2, 2], workers=2)),
    ("chain 2 -> 2 -> 2 (rank 0 saves each time)", False, lambda j: chain(j, [2, 2, 2])),
    ("chain 2 -> 4 -> 1", False, lambda j: chain(j, [2, 4, 1])),
    ("chain 3 -> 6 -> 2 -> 4", False, lambda j: chain(j, [3, 6, 2, 4])),
    ("packed, rank 0's unmerged state loaded on 2 ranks", True, lambda j: chain(j, [2, 2])),
    ("row mode, ranks out of step, `merge_state_dicts` of rank 0 only", False, async_merge_of_rank0),
    ("40 rows appended between save and resume", False, lambda j: table_change(j, "append")),
    ("12 rows deleted between save and resume", False, lambda j: table_change(j, "delete")),
    ("10 rows updated between save and resume", False, lambda j: table_change(j, "update")),
    ("README loop: 2 workers, batch 8, `state_dict()` after the first batch", False, readme_snippet),
    ("the same, packing", True, readme_snippet),
]


def run(impl: Impl, title: str, packed: bool, scenario: Callable[[Job], str], root: str) -> str:
    table = make_table(root, f"t{abs(hash((impl.name, title))) % 10**8}")
    try:
        return scenario(Job(impl, table, packed))
    except Exception as exc:  # a refusal is an outcome
        return f"refused: {type(exc).__name__}: {str(exc).split(';')[0][:110]}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", help="also write the outcomes to this file")
    args = parser.parse_args()
    logging.disable(logging.WARNING)
    warnings.simplefilter("ignore")
    impls = implementations()
    rows = []
    with tempfile.TemporaryDirectory() as root:
        for title, packed, scenario in SCENARIOS:
            rows.append({"scenario": title, **{i.name: run(i, title, packed, scenario, root) for i in impls}})
    print("| how the user saves / restores | " + " | ".join(i.name for i in impls) + " |")
    print("|---|" + "---|" * len(impls))
    for row in rows:
        print(f"| {row['scenario']} | " + " | ".join(row[i.name] for i in impls) + " |")
    if args.json:
        from meta import environment

        with open(args.json, "w") as handle:
            json.dump({"environment": environment(), "rows": rows}, handle, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
