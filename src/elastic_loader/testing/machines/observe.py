"""Reading what an implementation delivers as spec items (rows and blocks).

Rules of this module: a row is identified by its ``id`` column, a block by
its ``input_ids``/``doc_ids`` and the split of the spec's item at the same
place of the run (after a mid-cycle resume, catch-up decides which split
emits next, so the order of the owned splits cannot tell); anything that
cannot be read is returned as a text (the machine records it as a violation),
never raised. Only builtin containers and objects with ``tolist()`` (numpy,
torch) are read as lists; bools are not integers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ...spec import Block, Yielded
from ..tables import ID_COLUMN
from .model import EpochModel, Item


def to_list(value: object) -> list[object]:
    """``value`` as a list (``tolist()`` of an array or tensor, or a list or tuple)."""
    tolist = getattr(value, "tolist", None)
    if callable(tolist):
        out = tolist()
        return out if isinstance(out, list) else [out]
    if isinstance(value, (list, tuple)):
        return list(value)
    raise TypeError(f"cannot read {type(value).__name__} as a list")


def int_list(value: object) -> tuple[int, ...]:
    """``value`` as a tuple of ints (raises ``TypeError`` on anything else, bools included)."""
    out = to_list(value)
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in out):
        raise TypeError(f"expected integers, got {out!r}")
    return tuple(v for v in out if isinstance(v, int))


def decode_item(
    model: EpochModel, owned: Sequence[int], position: int, raw: object, model_items: Sequence[Item]
) -> Item | str:
    """The ``position``-th item an iterator over ``owned`` yielded, or why it cannot be read
    (``model_items``: the spec's items of the same run, which give a block its split)."""
    try:
        if model.packing is None:
            if not isinstance(raw, Mapping) or ID_COLUMN not in raw:
                return f"row {raw!r} has no {ID_COLUMN!r}"
            row_id = raw[ID_COLUMN]
            if isinstance(row_id, bool) or not isinstance(row_id, int) or row_id not in model.index:
                return f"row id {row_id!r} is not in the permutation"
            split, position_in_split = model.index[row_id]
            return Yielded(split, position_in_split, row_id)
        if not isinstance(raw, Mapping) or "input_ids" not in raw or "doc_ids" not in raw:
            return f"block {raw!r} lacks input_ids/doc_ids"
        ids, doc_ids = int_list(raw["input_ids"]), int_list(raw["doc_ids"])
    except TypeError as error:
        return str(error)
    pad = model.packing.pad_id
    real = ids.index(pad) if pad in ids else len(ids)
    split = model_items[position].split if position < len(model_items) else owned[position % len(owned)]
    return Block(split, ids, doc_ids, real)


def decode_batch(
    model: EpochModel, batch: object, model_items: Sequence[Item], offset: int
) -> list[Item] | str:
    """A ``StreamingDataLoader`` batch as items (a block's split is the spec's item at its offset)."""
    if not isinstance(batch, Mapping):
        return f"batch {batch!r} is not a mapping"
    try:
        if model.packing is None:
            out: list[Item] = []
            for row_id in int_list(batch.get(ID_COLUMN)):
                if row_id not in model.index:
                    return f"row id {row_id} is not in the permutation"
                s, p = model.index[row_id]
                out.append(Yielded(s, p, row_id))
            return out
        ids_rows, doc_rows = to_list(batch.get("input_ids")), to_list(batch.get("doc_ids"))
        blocks: list[Item] = []
        for j, (ids_raw, docs_raw) in enumerate(zip(ids_rows, doc_rows)):
            ids, docs = int_list(ids_raw), int_list(docs_raw)
            at = offset + j
            split = model_items[at].split if at < len(model_items) else -1
            real = ids.index(model.packing.pad_id) if model.packing.pad_id in ids else len(ids)
            blocks.append(Block(split, ids, docs, real))
        return blocks
    except TypeError as error:
        return str(error)
