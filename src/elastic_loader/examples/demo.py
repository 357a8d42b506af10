"""The elastic-loader demo: checkpoint mid-epoch, resume in a fresh process on another worker count.

``python -m elastic_loader.examples.demo [--dir demo_data]`` (``make demo``):

1. builds an embedded LanceDB token corpus under ``--dir`` (once);
2. computes the uninterrupted packed epoch in this process (the reference run);
3. phase A, a fresh process: a ``StreamingDataLoader`` with 2 worker processes
   trains on part of the epoch, then writes ``dataset.state_dict()`` to disk;
4. phase B, another fresh process: loads the checkpoint and finishes the epoch
   with 4 worker processes;
5. checks that the global steps of A then B are exactly the uninterrupted
   run's (same blocks in every step, none lost, none repeated) and prints
   throughput.

Exit status 0 means every check passed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

NUM_SPLITS = 8
CYCLES_PER_BATCH = 4
PACK = 256
DOCS = 20_000
SEED = 2024


def _progress(total: int, desc: str) -> Any:
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="blk", leave=True, dynamic_ncols=True)


def build_corpus(directory: Path) -> Any:
    """The token table (documents of 5-400 token ids), built once."""
    import lancedb
    import numpy as np
    import pyarrow as pa

    db = lancedb.connect(str(directory))
    if "corpus" not in db.list_tables().tables:
        rng = np.random.default_rng(SEED)
        lengths = rng.integers(5, 400, DOCS)
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        values = rng.integers(3, 32_000, int(offsets[-1]), dtype=np.int64)
        tokens = pa.LargeListArray.from_arrays(pa.array(offsets), pa.array(values))
        db.create_table("corpus", pa.table({"id": np.arange(DOCS), "tokens": tokens}))
    return db.open_table("corpus")


def dataset(table: Any, budget: int) -> Any:
    from elastic_loader import StreamingDataset

    return StreamingDataset(
        table,
        num_splits=NUM_SPLITS,
        shuffle_seed=SEED,
        columns=["tokens"],
        pack_sequences=PACK,
        eos_id=1,
        pad_id=0,
        blocks_per_epoch=budget,
    )


def digest(input_ids: Any, doc_ids: Any) -> str:
    """A short identity of a block's content (tokens and document ids)."""
    h = hashlib.sha1(input_ids.numpy().tobytes())
    h.update(doc_ids.numpy().tobytes())
    return h.hexdigest()[:16]


def budget_of(table: Any) -> int:
    import pyarrow.compute as pc

    lengths = pc.list_value_length(table.to_arrow().column("tokens"))
    blocks = (int(pc.sum(lengths).as_py()) + int(table.count_rows())) // PACK
    return int(blocks - blocks % NUM_SPLITS)


def phase(directory: Path, workers: int, steps: int | None, checkpoint: Path, load: bool) -> None:
    """Run in a fresh process: train ``steps`` global steps (None: to the end) with ``workers`` workers."""
    from elastic_loader import StreamingDataLoader

    table = build_corpus(directory)
    budget = budget_of(table)
    ds = dataset(table, budget)
    if load:
        ds.load_state_dict(json.loads(checkpoint.read_text()))
    # Each batch holds CYCLES_PER_BATCH cycles of the worker's splits, so every round of
    # ``workers`` batches ends at a step boundary where state_dict() is exact.
    loader = StreamingDataLoader(ds, batch_size=NUM_SPLITS // workers * CYCLES_PER_BATCH, num_workers=workers)
    total_steps = budget // NUM_SPLITS
    done_steps = ds.state_dict()["blocks_emitted_per_split"][0]
    todo = (total_steps - done_steps) if steps is None else steps
    delivered: list[str] = []
    t0 = time.perf_counter()
    with _progress(todo * NUM_SPLITS, f"phase {'B' if load else 'A'} ({workers} workers)") as bar:
        iterator = iter(loader)
        batches = None if steps is None else steps // CYCLES_PER_BATCH * workers
        for n, batch in enumerate(iterator, 1):
            delivered.extend(digest(i, d) for i, d in zip(batch["input_ids"], batch["doc_ids"]))
            bar.update(len(batch["input_ids"]))
            if n == batches:
                break
        seconds = time.perf_counter() - t0
        state = ds.state_dict()
        del iterator
    tokens = len(delivered) * PACK
    out = {"delivered": delivered, "seconds": seconds, "tokens": tokens, "state": state}
    checkpoint.with_suffix(f".{'B' if load else 'A'}.json").write_text(json.dumps(out))
    checkpoint.write_text(json.dumps(state))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dir", type=Path, default=Path("demo_data"))
    parser.add_argument("--phase", choices=["A", "B"], help=argparse.SUPPRESS)
    parser.add_argument("--workers", type=int, default=2, help=argparse.SUPPRESS)
    parser.add_argument("--steps", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    directory: Path = args.dir.resolve()
    directory.mkdir(parents=True, exist_ok=True)
    checkpoint = directory / "checkpoint.json"
    if args.phase:
        phase(directory, args.workers, args.steps, checkpoint, load=args.phase == "B")
        return 0

    print(f"elastic-loader demo in {directory}")
    table = build_corpus(directory)
    budget = budget_of(table)
    steps = budget // NUM_SPLITS
    print(f"corpus: {table.count_rows():,} documents; {NUM_SPLITS} splits; blocks of {PACK} tokens")

    t0 = time.perf_counter()
    reference = []
    with _progress(budget, "uninterrupted run (in process)") as bar:
        for block in dataset(table, budget):
            reference.append(digest(block["input_ids"], block["doc_ids"]))
            bar.update(1)
    reference_seconds = time.perf_counter() - t0
    stop_at = steps * 2 // 5 // CYCLES_PER_BATCH * CYCLES_PER_BATCH
    run = [sys.executable, "-m", "elastic_loader.examples.demo", "--dir", str(directory)]
    subprocess.run([*run, "--phase", "A", "--workers", "2", "--steps", str(stop_at)], check=True)
    subprocess.run([*run, "--phase", "B", "--workers", "4"], check=True)
    a = json.loads(checkpoint.with_suffix(".A.json").read_text())
    b = json.loads(checkpoint.with_suffix(".B.json").read_text())

    def global_steps(blocks: list[str]) -> list[list[str]]:
        # One training step = one round of batches = CYCLES_PER_BATCH cycles of every split.
        size = NUM_SPLITS * CYCLES_PER_BATCH
        return [sorted(blocks[i : i + size]) for i in range(0, len(blocks), size)]

    expected = global_steps(reference)
    resumed = global_steps(a["delivered"]) + global_steps(b["delivered"])
    checks = {
        "phase A stopped mid-epoch": 0 < len(a["delivered"]) < len(reference),
        "checkpoint counts exactly phase A's blocks": a["state"]["blocks_emitted_per_split"]
        == [stop_at] * NUM_SPLITS,
        "every global step equals the uninterrupted run's": resumed == expected,
        "no block lost or repeated": sorted(a["delivered"] + b["delivered"]) == sorted(reference),
        "the epoch ends exactly at the budget": b["state"]["blocks_emitted_per_split"]
        == [steps] * NUM_SPLITS,
    }
    print()
    print(f"uninterrupted, in process: {len(reference) * PACK / reference_seconds:>12,.0f} tokens/s")
    for name, result in (("phase A, 2 workers:", a), ("phase B, 4 workers:", b)):
        print(f"{name:27s}{result['tokens'] / result['seconds']:>12,.0f} tokens/s (worker start-up included)")
    print(f"resumed at global step {stop_at} of {steps} on a different worker count")
    for name, ok in checks.items():
        print(f"  [{'ok' if ok else 'FAILED'}] {name}")
    failed = [name for name, ok in checks.items() if not ok]
    print("demo passed" if not failed else f"demo FAILED: {failed}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
