"""accelerate with several processes (under ``torchrun``): each process runs, in order, an
uninterrupted 2-epoch run, a run that saves the accelerator's state after ``STOP`` steps and stops,
and a run that loads that state and finishes; it writes the three batch lists to
``<out>/rank<r>.json``. The loader is registered with ``register_for_checkpointing``: accelerate
writes the main process's state only, which resumes every process (lockstep inference).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import lancedb
import torch
from accelerate import Accelerator

from elastic_loader import StreamingDataLoader, StreamingDataset

STOP = 7


def run(uri: str, where: str, *, stop: int | None = None, resume: bool = False) -> list[list[int]]:
    accelerator = Accelerator(cpu=True)
    table = lancedb.connect(uri).open_table("t")
    ranks = {"world_size": accelerator.num_processes, "rank": accelerator.process_index}
    dataset = StreamingDataset(table, num_splits=4, columns=["id"], **ranks)
    loader = StreamingDataLoader(dataset, batch_size=4)
    model = torch.nn.Linear(1, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    model, optimizer, prepared = accelerator.prepare(model, optimizer, loader)
    assert prepared is loader
    accelerator.register_for_checkpointing(loader)
    if resume:
        accelerator.load_state(where)
    seen: list[list[int]] = []
    for _ in range(2):
        for batch in prepared:
            loss = model(batch["id"].float()[:, None]).pow(2).mean()
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            seen.append([int(v) for v in batch["id"].tolist()])
            if stop is not None and len(seen) == stop:
                accelerator.save_state(where)
                return seen
    return seen


def main(uri: str, out: str) -> None:
    where = str(Path(out, "state"))
    whole = run(uri, where)
    head = run(uri, where, stop=STOP)
    rest = run(uri, where, resume=True)
    accelerator: Any = Accelerator(cpu=True)
    result = {"whole": whole, "head": head, "rest": rest, "processes": accelerator.num_processes}
    Path(out, f"rank{accelerator.process_index}.json").write_text(json.dumps(result))
    accelerator.wait_for_everyone()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
