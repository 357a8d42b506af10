"""A worked example of the executable spec, printed and self-checked.

Run with ``python -m elastic_loader.examples.spec_walkthrough``. It needs no
table: the permutation is a fixed shuffle of 26 row ids, the faults are chosen
by hand, and every claim printed is checked against the model.
"""

from __future__ import annotations

import json
import random

from elastic_loader import spec


def main() -> int:
    """Print the walkthrough; return 0 when every self-check passed."""
    order = list(range(26))
    random.Random(7).shuffle(order)
    perm = spec.cut_splits(order, 4)
    config = spec.RunConfig(num_splits=4, shuffle_seed=7, epoch=0)
    print(f"26 rows cut into 4 splits of {len(perm[0])} (2 rows dropped): {perm}")

    print("\n1. Ownership: world_size=2, 2 workers per rank")
    for (r, w), owned in zip([(0, 0), (0, 1), (1, 0), (1, 1)], spec.worker_blocks(4, 2, 2)):
        print(f"   rank {r} worker {w} owns splits {owned}")

    run = spec.iterate_rows(perm, spec.Faults(), (0, 1, 2, 3), spec.initial_row_state(4))
    rows = [y.row_id for y in run.rows]
    print(f"\n2. One rank, no workers: rows in round-robin order\n   {rows}")

    mid = run.state_after(10)
    snapshot = spec.snapshot_row(config, mid)
    print(f"\n3. Checkpoint after 10 rows (mid-cycle):\n   {json.dumps(snapshot)}")
    resumed = spec.iterate_rows(
        perm, spec.Faults(), (0, 1, 2, 3), spec.load_row(config, snapshot, len(perm[0]))
    )
    assert [y.row_id for y in resumed.rows] == rows[10:], "resume must continue the sequence"
    print(f"   resuming replays the catch-up then the cycles: {[y.row_id for y in resumed.rows][:6]} ...")

    per_rank = [
        spec.iterate_rows(
            perm, spec.Faults(), spec.rank_splits(4, 2, r), spec.initial_row_state(4)
        ).state_after(n)
        for r, n in ((0, 6), (1, 2))
    ]
    merged = spec.merge_state_dicts([spec.snapshot_row(config, s) for s in per_rank])
    print(f"\n4. Two ranks out of step (6 and 2 rows); merged: {merged['samples_consumed_per_split']}")
    rest = spec.iterate_rows(perm, spec.Faults(), (0, 1, 2, 3), spec.load_row(config, merged, len(perm[0])))
    consumed = {
        y.row_id
        for r, n in ((0, 6), (1, 2))
        for y in spec.iterate_rows(
            perm, spec.Faults(), spec.rank_splits(4, 2, r), spec.initial_row_state(4)
        ).rows[:n]
    }
    left = [y.row_id for y in rest.rows]
    assert sorted(consumed | set(left)) == sorted(rows) and not consumed & set(left), "exactly once"
    print(f"   resumed on one rank: {len(left)} rows left, none lost, none repeated")

    steps = spec.global_steps(perm, spec.Faults(), 1)
    for world, workers in ((1, 0), (2, 0), (2, 2), (4, 0)):
        assert spec.topology_steps(config, perm, spec.Faults(), world, workers, 1) == steps
    print("\n5. Global steps are identical for (world_size, workers) in (1,0) (2,0) (2,2) (4,0)")

    corpus = {row: tuple(range(row % 5)) for row in order}
    packing = spec.PackingConfig(pack_sequences=6, eos_id=-1, pad_id=0, blocks_per_epoch=8)
    packed = spec.iterate_packed(
        perm, corpus, spec.Faults(), (0, 1, 2, 3), packing, spec.initial_packed_state(4)
    )
    print("\n6. Packing 6-token blocks, EOS=-1, PAD=0, 2 blocks per split:")
    for block in packed.blocks:
        print(f"   split {block.split}: input_ids={block.input_ids} doc_ids={block.doc_ids}")
    assert len(packed.blocks) == 8 and all(len(b.input_ids) == 6 for b in packed.blocks)
    print("\nAll self-checks passed.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
