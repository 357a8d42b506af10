"""Columnar batches: a StreamingDataLoader mode that yields whole batches, never one object per row.

Rules:
* ``StreamingDataLoader(ds, batch_size=B, batch_format=...)`` with ``"arrow"`` (a
  ``pyarrow.RecordBatch``), ``"numpy"`` (a dict of column name to ``numpy.ndarray``) or
  ``"torch"`` (a dict of column name to ``torch.Tensor``). Each iterator (the trainer's process,
  or each DataLoader worker) cuts its own canonical row sequence into batches of ``B`` rows, as
  torch's fetcher does in row mode: batch ``k`` of an iterator holds exactly the rows row mode
  would collate into its batch ``k``, in the same order, and the checkpoint it carries is the
  row-mode checkpoint after those rows (``drop_last``: an iterator's short last batch is not
  yielded, its rows not counted). Checkpoints of both modes load into either.
* The rows never become Python objects: units are read as Arrow (no transform stage), a split's
  ready rows are Arrow slices, and a chunk of ``k`` whole cycles is assembled with one gather
  (split-major concatenation, then an interleaving ``take``; one owned split needs neither, and
  each batch copies its rows once). Lagging splits catch up first, one
  row at a time, as in row mode (``_rows.iterate``).
* Progress moves only when a batch is handed out: everything a batch needs (reads, gather,
  conversion) happens first, then the cursor records its rows, then it is yielded. A read that
  fails drops the rows of the unfinished batch from the progress: they were never delivered.
* A packed dataset (``pack_sequences``) yields packed batches in ``"torch"`` or ``"numpy"``
  format (:func:`stacked`): ``{"input_ids", "doc_ids"}`` of shape ``(B, L)``, what the default
  collate stacks from the same ``B`` blocks of one iterator, written once (in a DataLoader worker
  into shared memory, as the default collate does), or, in the trainer's process when the blocks
  are consecutive rows of one chunk (one owned split), a view of them as single blocks are;
  ``"arrow"`` is refused. A block counts as
  handed out when it joins the pending batch, which is yielded as soon as it is full, so every
  state a consumer sees is the per-block state after a whole batch: the checkpoints are the
  default collate's.
* Otherwise the dataset must be in row mode without a ``transform`` (a transform returns Python rows);
  ``collate_fn``, if given, receives each columnar batch and returns what the trainer gets.
  ``"torch"`` needs numeric or boolean columns (fixed-size lists of numbers become 2-D tensors);
  another column raises ``TypeError`` naming it when the loader is built (a null value: at its
  first batch); choose ``columns=`` or another format.
"""

from __future__ import annotations

import functools
from collections import deque
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.types as pat

from ._fetch import Pipeline, Stage, Unit
from ._rows import MAX_CHUNK_CYCLES, RowCursor, catch_up_order
from ._stats import Counters

if TYPE_CHECKING:
    from ._packing import ChunkRow

FORMATS = ("arrow", "numpy", "torch")
CHUNK_ROWS = 8192
"""Rows gathered at once (at least; at least four batches), when every owned split has them ready."""
MAX_UNIT_ROWS = 131072
"""Rows one read may bring (its bytes stay within the pipeline's unit size and budget): eight times
the pipeline's default, since no row becomes a Python object. Columnar batches of 98-byte rows in
storage order (one split, range scans) ran at 0.47 of a sequential scan with reads of at most
16384 rows and at 0.57-0.64 with 65536 or more (one process, the cap switched between runs, 5-7
interleaved rounds, 2026-12-06; benchmarks/README.md, "Columnar batches against the scan")."""


@dataclass(frozen=True)
class Columnar:
    """The columnar mode of one loader: rows per batch, the batch format, and ``drop_last``."""

    batch_size: int
    batch_format: str
    drop_last: bool = False


def check(batch_format: object, batch_size: object, dataset_mode: str | None) -> None:
    """Validate a columnar loader's options; ``dataset_mode`` names what the dataset yields
    instead of rows (``"pack_sequences"``: packed batches, ``_packing``; ``"transform"``) or is
    ``None``.

    Raises:
        TypeError: ``batch_format`` is not a str, or ``batch_size`` not an int.
        ValueError: an unknown format, ``batch_size`` is ``None`` or below 1, or the dataset
            does not yield plain rows (packed blocks: only ``"arrow"`` is refused).
    """
    if not isinstance(batch_format, str):
        raise TypeError(f"batch_format must be None or one of {FORMATS}, got {batch_format!r}")
    if batch_format not in FORMATS:
        raise ValueError(f"batch_format must be one of {FORMATS} (None: rows), got {batch_format!r}")
    if batch_size is None:
        raise ValueError(f"batch_format={batch_format!r} needs a batch_size (rows per batch), got None")
    if not isinstance(batch_size, int) or isinstance(batch_size, bool):
        raise TypeError(f"batch_size must be an int, got {batch_size!r}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if dataset_mode == "pack_sequences" and batch_format == "arrow":
        raise ValueError(
            "batch_format='arrow' cannot be combined with pack_sequences: packed blocks are token "
            "arrays, not table rows; use batch_format='torch' or 'numpy' (each batch a dict of "
            "(batch_size, pack_sequences) arrays) or batch_format=None (the default collate stacks them)"
        )
    if dataset_mode == "transform":
        raise ValueError(
            f"batch_format={batch_format!r} reads Arrow columns, but the dataset has a transform, which "
            "returns Python rows: drop transform= and convert each batch in collate_fn instead "
            "(collate_fn receives the columnar batch)"
        )


def check_types(batch_format: str, types: dict[str, pa.DataType]) -> None:
    """``TypeError`` when ``batch_format`` cannot hold a column of ``types`` (``"torch"``: numbers,
    bools and fixed-size lists of numbers only; nulls are found at the first batch that has one)."""
    if batch_format != "torch":
        return
    for name, kind in types.items():
        if pat.is_fixed_size_list(kind):
            kind = kind.value_type
            if not (pat.is_integer(kind) or pat.is_floating(kind)):
                raise TypeError(_torch_refuses(name, f"type {types[name]}"))
        elif not (pat.is_integer(kind) or pat.is_floating(kind) or pat.is_boolean(kind)):
            raise TypeError(_torch_refuses(name, f"type {kind}"))


def _torch_refuses(name: str, what: str) -> str:
    return (
        f"batch_format='torch' cannot hold column {name!r} ({what}); read other columns "
        "(columns=[...]) or use batch_format='numpy' or 'arrow'"
    )


def make_stage() -> Stage:
    """The columnar stage: a unit stays the Arrow table it was read as (its batches uncopied)."""

    def run(part: pa.Table) -> pa.Table:
        return part

    def combine(parts: list[tuple[int, pa.Table]]) -> pa.Table:
        if len(parts) == 1:
            return parts[0][1]
        return pa.concat_tables([p for _, p in parts])

    return Stage(run, combine, None, one_batch=False, max_unit_rows=MAX_UNIT_ROWS)


class ColumnarFeed:
    """Ready rows of every owned split as Arrow slices (``error`` is there for ``RowDemand``: a
    columnar split never holds a failing row)."""

    def __init__(self, n: int, start: list[int]) -> None:
        self._runs: list[deque[pa.RecordBatch]] = [deque() for _ in range(n)]
        self._ready = [0] * n
        self.next_position = list(start)
        """Per split: the position of its first ready row (positions are consecutive)."""
        self._arrived = list(start)
        self.error: list[BaseException | None] = [None] * n
        self._row_bytes = 0.0
        self._ready_rows = 0

    def ready(self, i: int) -> int:
        return self._ready[i]

    def held_bytes(self) -> int:
        return int(self._ready_rows * self._row_bytes)

    def distribute(self, unit: Unit, table: pa.Table, counters: Counters) -> None:
        self._row_bytes = (unit.nbytes or table.nbytes) / max(1, unit.rows)
        for seg in unit.segments:
            i = seg.split
            if seg.first != self._arrived[i]:  # the pipeline reads each split's positions in order
                raise AssertionError(f"split {i}: position {seg.first} arrived, {self._arrived[i]} expected")
            self._arrived[i] += seg.count
            self._runs[i].extend(b for b in table.slice(seg.offset, seg.count).to_batches() if b.num_rows)
            self._ready[i] += seg.count
        self._ready_rows += unit.rows
        counters.add(ready_rows=unit.rows)

    def take(self, i: int, k: int) -> tuple[list[pa.RecordBatch], range]:
        """The next ``k`` ready rows of split ``i`` (slices) and their positions."""
        runs, out, left = self._runs[i], [], k
        while left:
            run = runs[0]
            if run.num_rows <= left:
                out.append(runs.popleft())
                left -= run.num_rows
            else:
                out.append(run.slice(0, left))
                runs[0] = run.slice(left)
                left = 0
        first = self.next_position[i]
        self.next_position[i] += k
        self._ready[i] -= k
        self._ready_rows -= k
        return out, range(first, first + k)


class _Chunk:
    """``k`` cycles of ``n`` splits: the splits' rows concatenated (split-major), and the order
    that interleaves them (row ``j * n + i`` of the chunk is split ``i``'s ``j``-th row). With one
    split the canonical order is the split's own: its slices are kept as they are (no copy, no
    interleaving ``take``), and a gather returns slices of them, which the batch copies once."""

    def __init__(self, parts: list[list[pa.RecordBatch]], k: int) -> None:
        n = len(parts)
        self.order: np.ndarray | None = None
        if n == 1:
            self.rows: pa.Table | pa.RecordBatch = pa.Table.from_batches(parts[0])
        else:
            self.rows = pa.concat_batches([b for split in parts for b in split])
            self.order = np.arange(n * k, dtype=np.int64).reshape(n, k).T.ravel()

    def gather(self, offset: int, count: int) -> tuple[list[pa.RecordBatch], bool]:
        """Rows ``[offset, offset + count)`` of the chunk in canonical order, and whether they hold
        buffers of their own (a ``take``) or are slices of the units (one split)."""
        if self.order is None:
            return self.rows.slice(offset, count).to_batches(), False
        return [self.rows.take(pa.array(self.order[offset : offset + count]))], True


def _column_to_numpy(name: str, column: pa.Array, strict: bool) -> np.ndarray:
    kind = column.type
    fixed = pat.is_fixed_size_list(kind) and column.null_count == 0
    if fixed and (pat.is_integer(kind.value_type) or pat.is_floating(kind.value_type)):
        values = column.flatten().to_numpy(zero_copy_only=False)
        return np.array(values.reshape(len(column), kind.list_size))
    numeric = pat.is_integer(kind) or pat.is_floating(kind) or pat.is_boolean(kind)
    if strict and (not numeric or column.null_count):
        raise TypeError(_torch_refuses(name, "nulls" if numeric else f"type {kind}"))
    return np.array(column.to_numpy(zero_copy_only=False))


def converter(batch_format: str) -> Callable[[pa.RecordBatch], Any]:
    """What a batch becomes in ``batch_format`` (arrays are copies the trainer owns)."""
    if batch_format == "arrow":
        return lambda batch: batch
    if batch_format == "numpy":
        return lambda batch: {
            name: _column_to_numpy(name, col, False) for name, col in zip(batch.schema.names, batch.columns)
        }
    import torch

    return lambda batch: {
        name: torch.from_numpy(_column_to_numpy(name, col, True))
        for name, col in zip(batch.schema.names, batch.columns)
    }


class _Batcher:
    """Collects the pieces of one batch and the cursor moves that record its rows. A batch is
    one buffer of its own: it is copied out of its pieces unless it is a single piece that owns
    its buffers (a slice would pin, and pickle, the whole unit it was cut from)."""

    def __init__(self, convert: Callable[[pa.RecordBatch], Any]) -> None:
        self.convert = convert
        self.pieces: list[pa.RecordBatch] = []
        self.owned = True
        self.rows = 0
        self.moves: list[Callable[[], None]] = []

    def add(self, pieces: list[pa.RecordBatch], owned: bool, rows: int, move: Callable[[], None]) -> None:
        """``rows`` rows of the batch (``owned``: the pieces hold buffers of their own, not slices),
        and the cursor move that records them."""
        self.pieces.extend(pieces)
        self.owned = self.owned and owned
        self.rows += rows
        self.moves.append(move)

    def take(self) -> Any:
        """The batch, converted; only then its cursor moves are applied (a conversion error leaves
        its rows undelivered). The batcher starts the next batch."""
        pieces, moves = self.pieces, self.moves
        batch = pieces[0] if len(pieces) == 1 and self.owned else pa.concat_batches(pieces)
        self.pieces, self.owned, self.rows, self.moves = [], True, 0, []
        value = self.convert(batch)
        for move in moves:
            move()
        return value


def _catch_up(
    pipeline: Pipeline, feed: ColumnarFeed, cursor: RowCursor, owned: list[int], counters: Counters
) -> Iterator[tuple[pa.RecordBatch, Callable[[], None]]]:
    """The rows of lagging splits, one at a time (``_rows.catch_up_order``), with their cursor moves."""
    for i in catch_up_order(cursor.samples, owned):
        if not _fill(pipeline, feed, i, counters):
            return
        (row,), positions = feed.take(i, 1)

        def move(i: int = i, position: int = positions[0]) -> None:
            cursor.step(i, position)
            counters.add(ready_rows=-1, consumed_rows=1, rows_delivered=1)

        yield row, move  # a slice of its unit: the batch copies it


def _fill(pipeline: Pipeline, feed: ColumnarFeed, i: int, counters: Counters) -> bool:
    """Make split ``i`` have a ready row; False at the end of its rows."""
    while feed.ready(i) == 0:
        got = pipeline.next_unit()
        if got is None:
            return False
        feed.distribute(got[0], got[1], counters)
    return True


def iterate(
    pipeline: Pipeline,
    feed: ColumnarFeed,
    cursor: RowCursor,
    owned: list[int],
    counters: Counters,
    mode: Columnar,
) -> Iterator[Any]:
    """Batches of ``mode.batch_size`` rows of the owned splits in canonical order (catch-up, then
    cycles), each converted to ``mode.batch_format`` before the cursor records its rows (a
    conversion error leaves them undelivered); the last chunk is folded at the end."""
    size, n = mode.batch_size, len(owned)
    out = _Batcher(converter(mode.batch_format))
    try:
        for row, move in _catch_up(pipeline, feed, cursor, owned, counters):
            out.add([row], False, 1, move)
            if out.rows == size:
                yield out.take()
        while all(_fill(pipeline, feed, i, counters) for i in range(n)):
            wanted = max(-(-4 * size // n), -(-CHUNK_ROWS // n))
            k = min(MAX_CHUNK_CYCLES, wanted, min(feed.ready(i) for i in range(n)))
            taken = [feed.take(i, k) for i in range(n)]
            chunk = _Chunk([slices for slices, _ in taken], k)
            positions = [p for _, p in taken]
            out.moves.append(functools.partial(_begin, cursor, counters, positions))
            offset, total = 0, n * k
            while offset < total:
                step = min(size - out.rows, total - offset)
                pieces, own = chunk.gather(offset, step)
                offset += step
                out.add(pieces, own, step, functools.partial(setattr, cursor, "cursor", offset))
                if out.rows == size:
                    yield out.take()
        if out.rows and not mode.drop_last:
            yield out.take()
    finally:
        cursor.end(counters)


def _begin(cursor: RowCursor, counters: Counters, positions: list[range]) -> None:
    """A chunk's first rows are handed out: fold the previous chunk, start this one."""
    cursor.end(counters)
    cursor.begin(positions)


def stacked(blocks: Generator[ChunkRow, None, None], mode: Columnar, length: int) -> Iterator[dict[str, Any]]:
    """Packed batches: ``mode.batch_size`` consecutive blocks (``input_ids``, ``doc_ids`` rows)
    at a time as ``(B, length)`` arrays or tensors (``drop_last``: not a short last batch)."""
    size, pending = mode.batch_size, []
    try:
        for block in blocks:
            pending.append(block)
            if len(pending) == size:
                batch, pending = _stack(pending, length, mode.batch_format), []
                yield batch
        if pending and not mode.drop_last:
            yield _stack(pending, length, mode.batch_format)
    finally:
        blocks.close()  # ends the packed chunk at the last block handed out


def _stack(pending: list[ChunkRow], length: int, batch_format: str) -> dict[str, Any]:
    """One packed batch. Blocks that are consecutive rows of one chunk (one owned split) are
    handed out in the trainer's process as a view of those rows, as single blocks are (the packer
    never writes a chunk once cut); otherwise, and always in a DataLoader worker, the batch is
    written once into buffers of its own."""
    from torch.utils.data import get_worker_info

    ids, doc_ids, first = pending[0]
    rows = len(pending)
    run = pending[-1][2] - first == rows - 1 and all(block[0] is ids for block in pending)
    in_worker = get_worker_info() is not None
    if run and not in_worker:
        arrays = {"input_ids": ids[first : first + rows], "doc_ids": doc_ids[first : first + rows]}
        return _as_format(arrays, batch_format)
    if batch_format == "torch":
        tensors = {name: _empty_tensor(rows, length, in_worker) for name in ("input_ids", "doc_ids")}
        arrays = {name: t.numpy() for name, t in tensors.items()}
    else:
        arrays = {name: np.empty((rows, length), np.int64) for name in ("input_ids", "doc_ids")}
    if run:
        arrays["input_ids"][...] = ids[first : first + rows]
        arrays["doc_ids"][...] = doc_ids[first : first + rows]
    else:
        out_ids, out_doc_ids = arrays["input_ids"], arrays["doc_ids"]
        for j, (block_ids, block_doc_ids, row) in enumerate(pending):
            out_ids[j] = block_ids[row]
            out_doc_ids[j] = block_doc_ids[row]
    return tensors if batch_format == "torch" else arrays


def _as_format(arrays: dict[str, np.ndarray], batch_format: str) -> dict[str, Any]:
    """``arrays`` as ``batch_format`` wants them: as they are, or tensors over the same memory."""
    if batch_format != "torch":
        return arrays
    import torch

    return {name: torch.from_numpy(array) for name, array in arrays.items()}


def _empty_tensor(rows: int, length: int, shared: bool) -> Any:
    """An int64 ``(rows, length)`` tensor; ``shared`` (in a DataLoader worker) its storage is shared
    memory, so the batch reaches the trainer's process without another copy (as with the default
    collate)."""
    import torch

    if not shared:
        return torch.empty((rows, length), dtype=torch.int64)
    template = torch.empty(0, dtype=torch.int64)
    storage = template._typed_storage()._new_shared(  # type: ignore[no-untyped-call]  # as default_collate
        rows * length, device=template.device
    )
    return template.new(storage).resize_(rows, length)
