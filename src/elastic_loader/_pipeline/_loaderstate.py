"""A StreamingDataLoader's checkpoint: one opaque entry that every framework keeps whole.

Rules:
* ``StreamingDataLoader.state_dict()`` is ``{"elastic_loader": "<JSON text>"}``: a single key whose
  value is a string. Frameworks that flatten nested dicts and keep one rank's value per key
  (``torch.distributed.checkpoint``) or drop keys missing from a fresh template therefore keep or
  drop the whole state, never part of it, and whichever rank's string survives is a complete
  state (the dataset's state resumes every rank under lockstep).
* The JSON object holds ``format`` (:data:`FORMAT`), ``dataset`` (the dataset's ``state_dict()``,
  in ``lancedb.streaming``'s format plus its own provenance key) and ``epoch_finished`` (the
  loader's epoch was fully delivered: the next iteration starts the next epoch).
* Decoding accepts that shape only, or a plain dataset ``state_dict()`` (then the epoch is not
  marked finished), and says what is wrong otherwise. It checks no dataset keys: the dataset's
  ``load_state_dict`` does.

This module imports only the standard library.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

KEY = "elastic_loader"
FORMAT = 1


def encode(dataset_state: Mapping[str, object], epoch_finished: bool) -> dict[str, Any]:
    """The loader's ``state_dict()`` for ``dataset_state``."""
    body = {"format": FORMAT, "dataset": dataset_state, "epoch_finished": bool(epoch_finished)}
    return {KEY: json.dumps(body, sort_keys=True, separators=(",", ":"))}


def decode(state: object) -> tuple[dict[str, object], bool]:
    """The dataset state and the epoch-finished flag of a loader ``state_dict()``.

    Raises:
        TypeError: ``state`` is not a dict.
        ValueError: the entry is not a loader state of a known format.
    """
    if not isinstance(state, Mapping):
        raise TypeError(f"a StreamingDataLoader state must be a dict, got {type(state).__name__}")
    if "num_splits" in state:  # a dataset's own state_dict(): accepted as it is
        return dict(state), False
    text = state.get(KEY)
    if not isinstance(text, (str, bytes)) or len(state) != 1:
        raise ValueError(
            f"a StreamingDataLoader state is {{{KEY!r}: <JSON string>}}; got keys {sorted(map(str, state))}"
            " (was the state saved by another loader, or split into several entries?)"
        )
    try:
        body = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"the StreamingDataLoader state is not valid JSON ({exc})") from exc
    if not isinstance(body, dict) or body.get("format") != FORMAT:
        found = body.get("format") if isinstance(body, dict) else None
        raise ValueError(f"unknown StreamingDataLoader state format {found!r} (this version reads {FORMAT})")
    dataset, finished = body.get("dataset"), body.get("epoch_finished")
    if not isinstance(dataset, dict) or not isinstance(finished, bool):
        raise ValueError("a StreamingDataLoader state needs a 'dataset' dict and an 'epoch_finished' flag")
    return dataset, finished


WORKER_KEY = "elastic_loader_worker"
"""The key a worker copy's ``state_dict()`` adds: which worker of how many wrote it."""


def dataset_state(state: dict[str, object], worker: tuple[int, int] | None) -> dict[str, object]:
    """``state`` as a dataset loads it in ``worker`` (``(id, num_workers)``; ``None``: the main process).

    A worker's own state (torchdata's per-worker snapshots, tagged :data:`WORKER_KEY`) holds that
    worker's splits only (the others stay where the worker last saw them), so it resumes that
    worker of a loader with the same ``num_workers`` and nothing else; its tag is dropped. A
    StreamingDataLoader's state is refused: the loader loads it.
    """
    if isinstance(state, dict) and len(state) == 1 and isinstance(state.get(KEY), str):
        raise ValueError(
            "this is a StreamingDataLoader's state_dict(); load it with "
            "StreamingDataLoader.load_state_dict (the dataset's own state is inside it)"
        )
    if not isinstance(state, dict) or WORKER_KEY not in state:
        return state
    tag = state[WORKER_KEY]
    saved = tag if isinstance(tag, dict) else {}
    here = (None, 0) if worker is None else worker
    if (saved.get("worker"), saved.get("num_workers")) != here:
        where = "the main process" if worker is None else f"worker {here[0]} of {here[1]}"
        raise ValueError(
            f"this state is the own state of DataLoader worker {saved.get('worker')} of "
            f"{saved.get('num_workers')} (torchdata's StatefulDataLoader saves one per worker) and "
            f"cannot resume {where}: such a state holds only that worker's splits, so it resumes only "
            "a loader with the same num_workers (torchdata requires that too). Resume with "
            f"num_workers={saved.get('num_workers')}, or use elastic_loader.StreamingDataLoader, whose "
            "state_dict() resumes on any number of workers"
        )
    return {k: v for k, v in state.items() if k != WORKER_KEY}
