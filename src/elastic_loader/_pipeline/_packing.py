"""Sequence packing with NumPy: blocks are cut from per-split token streams.

Rules:
* Each owned split has a *stream*: the tokens pulled into its buffer (from
  the checkpoint or earlier cycles), followed by documents fetched but not
  yet pulled, each document followed by EOS. ``pulled`` marks the end of the
  buffer inside the stream.
* Cycle r (0-based from now) first *fills*: pull whole documents until the
  buffer reaches (r + 1) * L tokens, or the split runs out. Then every split
  *emits* block r: stream[r*L:(r+1)*L], padded with pad_id if the split ran
  out. ``doc_ids[k]`` counts document starts at offsets 1..k of the block.
* Cycles are computed k at a time with vectorized search and reshape: k is
  how many cycles every owned split can complete with what is fetched.
* A document that must raise (null tokens in "raise" mode) stops its split:
  the error surfaces at the cycle whose fill needs that document.
* Progress is exact after every block; inside a chunk it is derived on
  demand from the chunk's arrays (fills of a cycle are visible as soon as
  its first block is handed out, as in the reference).
* Tokens are copied once on their way into a stream: when the blocks being
  cut need more tokens than the stream holds, appended documents are gathered
  from their read batch (in row-id order) in the split's order, each followed
  by EOS. Blocks are views of the stream; what a chunk leaves over is cut from
  where it is by the next chunk (copied again only together with new
  documents, when it is shorter than the next chunk's blocks).
* A loader's packed batches (``batch_format``) are these blocks, ``B`` at a time (``_columnar.stacked``).
* Bytes: a stream holds 8 bytes per token; a chunk of k cycles over n splits
  holds ``k * n * L * BLOCK_BYTES_PER_TOKEN`` bytes (its blocks' tokens and
  ``doc_ids``) until it ends, so k is capped by the byte budget too (at least
  one cycle). ``PackFeed.held_bytes`` is what the pipeline counts as buffered.
* A chunk also holds at most ``CHUNK_SPLIT_BYTES`` a split (or one batch, if that is more):
  its arrays are freed together when its last block is dropped, and a free that leaves more
  than glibc's trim threshold at the top of the heap gives the memory back, to be faulted in and
  zeroed again for the next chunk (docs/PIPELINE.md, "Chunk size and the heap").
"""

from __future__ import annotations

import heapq
import threading
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import torch

from . import _documents
from ._checkpoint import Tokens
from ._documents import DocPayload, Fetched
from ._fetch import Pipeline, Unit
from ._stats import Counters

MAX_CHUNK_CYCLES = 1024
TOKEN_BYTES = 8
BLOCK_BYTES_PER_TOKEN = 16
"""A yielded block's token: its ``input_ids`` entry and its ``doc_ids`` entry."""
CHUNK_SPLIT_BYTES = 8 * 2**20
"""A chunk's block bytes per owned split (256 cycles of 2048 tokens; 1024 cycles at up to 512): two
chunks of one split stay below the 48 MiB trim threshold glibc has once the mmap threshold is
raised (``_allocator``), where chunks of 1024 cycles of 2048 tokens (32 MiB) made every chunk's
pages fresh (a fifth of the consumer's time zeroing pages, ``perf``)."""


class SplitStream:
    """One owned split's token stream (buffer, then fetched documents)."""

    def __init__(self, tokens: Tokens, starts: Tokens, consumed: int, emitted: int) -> None:
        self.tokens = np.asarray(tokens, dtype=np.int64)
        self.starts = np.asarray(starts, dtype=np.int64)
        self.pulled = len(tokens)
        self.ends = np.zeros(0, dtype=np.int64)
        self.positions = np.zeros(0, dtype=np.int64)
        self.consumed = consumed
        self.emitted = emitted
        self.error: BaseException | None = None
        """The error of the first failing document this split fetched; nothing after it is kept."""
        self._parts: list[Fetched] = []
        self._part_tokens = 0
        self.fetched_docs = 0
        self.fetched_tokens = 0

    def _settle(self) -> None:
        """Copy the appended documents into the stream (each token once)."""
        if not self._parts:
            return
        held = len(self.tokens)
        tokens = np.empty(held + self._part_tokens, dtype=np.int64)
        tokens[:held] = self.tokens
        starts, ends = [self.starts], [self.ends]
        for part in self._parts:
            size = int(part.ends[-1])
            part.copy_into(tokens[held : held + size])
            starts.append(held + part.ends - part.sizes)
            ends.append(held + part.ends)
            held += size
        self.tokens = tokens
        self.starts = np.concatenate(starts)
        self.ends = np.concatenate(ends)
        self.positions = np.concatenate([self.positions, *(part.positions for part in self._parts)])
        self._parts.clear()
        self._part_tokens = 0

    def stream_len(self) -> int:
        """Tokens in the stream: the buffer and the fetched documents, EOS included."""
        return len(self.tokens) + self._part_tokens

    def append(
        self,
        values: list[np.ndarray],
        lo: np.ndarray,
        lengths: np.ndarray,
        positions: np.ndarray,
        eos: int,
        chunk: np.ndarray | None = None,
    ) -> None:
        """Append documents ``values[chunk[i]][lo[i]:lo[i] + lengths[i]]`` (``values[0]`` without
        ``chunk``) in order, each followed by EOS.

        They are copied into the stream when it is next read (``_settle``)."""
        if len(lengths) == 0:
            return
        sizes = lengths + 1
        ends = np.cumsum(sizes)
        self._parts.append(Fetched(values, lo, sizes, ends, positions.astype(np.int64), eos, chunk))
        self._part_tokens += int(ends[-1])
        self.fetched_docs += len(lengths)
        self.fetched_tokens += int(ends[-1])

    def available_cycles(self, length: int, exhausted: bool) -> int | None:
        """Cycles this split can complete now (``None``: unlimited, it only pads from here)."""
        if exhausted and self.error is None:
            return None
        total = self.stream_len()
        return total // length


@dataclass
class ChunkSplit:
    """What one split did in a chunk of k cycles, enough to answer any mid-chunk checkpoint."""

    tokens: np.ndarray  # stream at chunk start (padded view is not stored)
    starts: np.ndarray
    consumed: np.ndarray  # consumed position after the fill of each cycle
    pulled: np.ndarray  # buffer end (stream offset) after the fill of each cycle
    docs: np.ndarray  # documents pulled in this chunk up to the fill of each cycle
    emitted0: int
    consumed0: int
    pulled0: int
    _marks: tuple[list[int], list[int], list[int], list[int]] | None = None

    def marks(self, length: int) -> tuple[list[int], list[int], list[int], list[int]]:
        """Made once per chunk, for the states asked inside it: as lists, the consumed position
        after the fill of each cycle (the chunk's start last), the buffer end likewise, the index
        in ``starts`` of the first document start at or after each block start (blocks ``0..k``),
        and of each buffer end (capped at the stream's tokens)."""
        if self._marks is None:
            consumed = [*self.consumed.tolist(), self.consumed0]
            pulled = [*self.pulled.tolist(), self.pulled0]
            blocks = np.arange(len(self.consumed) + 1, dtype=np.int64) * length
            at_block = np.searchsorted(self.starts, blocks).tolist()
            at_end = np.searchsorted(self.starts, np.minimum(pulled, len(self.tokens))).tolist()
            self._marks = (consumed, pulled, at_block, at_end)
        return self._marks


def emit_cycles(
    stream: SplitStream, k: int, length: int, pad: int
) -> tuple[np.ndarray, np.ndarray, ChunkSplit]:
    """Cut ``k >= 1`` cycles of one split: (input_ids k x L, doc_ids k x L, chunk record).

    A split with too few tokens left (it is exhausted) fills its blocks with ``pad``.
    """
    assert k >= 1, "a chunk has at least one cycle"
    if len(stream.tokens) < k * length:
        # copy fetched documents in only when the k blocks need them: tokens left over from one
        # chunk are then cut from where they are, not copied again with the next documents
        stream._settle()
    targets = (np.arange(k, dtype=np.int64) + 1) * length
    n_docs = len(stream.ends)
    if n_docs:
        need = np.searchsorted(stream.ends, targets, side="left") + 1
        need = np.minimum(need, n_docs)
        need = np.where(stream.pulled >= targets, 0, need)
        need = np.maximum.accumulate(need)
    else:
        need = np.zeros(k, dtype=np.int64)
    consumed = (
        np.where(need > 0, stream.positions[np.maximum(need - 1, 0)] + 1, stream.consumed)
        if n_docs
        else (np.full(k, stream.consumed, dtype=np.int64))
    )
    pulled = (
        np.where(need > 0, stream.ends[np.maximum(need - 1, 0)], stream.pulled)
        if n_docs
        else np.full(k, stream.pulled, dtype=np.int64)
    )
    pulled = np.maximum(pulled, stream.pulled)
    record = ChunkSplit(
        stream.tokens, stream.starts, consumed, pulled, need, stream.emitted, stream.consumed, stream.pulled
    )
    total = k * length
    tokens = stream.tokens
    if len(tokens) >= total:
        ids = tokens[:total].reshape(k, length)  # a view: the stream is never written in place
    else:
        flat_ids = np.full(total, pad, dtype=np.int64)
        flat_ids[: len(tokens)] = tokens
        ids = flat_ids.reshape(k, length)
    doc_ids = _doc_ids(stream.starts[stream.starts < total], k, length)
    pulled_docs = int(need[-1])
    # advance the stream past the k emitted blocks (empty when the blocks were padded)
    stream.tokens = tokens[total:]
    stream.starts = stream.starts[stream.starts >= total] - total
    stream.ends = stream.ends[pulled_docs:] - total
    stream.positions = stream.positions[pulled_docs:]
    stream.pulled = max(0, int(pulled[-1]) - total)
    stream.consumed = int(consumed[-1])
    stream.emitted += k
    return ids, doc_ids, record


def _doc_ids(starts: np.ndarray, k: int, length: int) -> np.ndarray:
    """``k x length`` doc_ids: in each row, how many document starts lie at offsets 1..j.

    ``starts`` (sorted, below ``k * length``) are the document starts of the
    flat blocks. The compiled ``doc_ids`` writes them where it was built; else,
    the ids being constant between starts and row starts, each run is written
    once with ``np.repeat``.
    """
    compiled = _documents.native_doc_ids
    if compiled is not None:
        out = np.empty((k, length), dtype=np.int64)
        compiled(starts, out, length)
        return out
    inner = starts[starts % length != 0]  # a start at offset 0 of a row counts for nothing
    rank = np.arange(1, len(inner) + 1) - np.searchsorted(inner, inner // length * length)
    points = np.concatenate([np.arange(k, dtype=np.int64) * length, inner])
    ids = np.concatenate([np.zeros(k, dtype=np.int64), rank])
    order = np.argsort(points)  # the points are distinct
    points = points[order]
    runs = np.diff(points, append=k * length)
    return np.repeat(ids[order], runs).reshape(k, length)


class PackFeed:
    """Distributes fetched documents to the owned splits' streams; counts the bytes they hold."""

    def __init__(self, streams: list[SplitStream], eos: int, counters: Counters) -> None:
        self.streams = streams
        self.eos = eos
        self.counters = counters
        self.chunk_bytes = 0
        """Bytes of the chunk being yielded (its blocks' tokens and doc_ids)."""

    def held_bytes(self) -> int:
        """Bytes the streams hold (tokens, EOS included) plus the chunk being yielded."""
        return TOKEN_BYTES * sum(s.stream_len() for s in self.streams) + self.chunk_bytes

    def distribute(self, unit: Unit, payload: DocPayload) -> None:
        where = unit.where
        assert where is not None  # packing reads every unit in row-id order
        added = 0
        for seg in unit.segments:
            stream = self.streams[seg.split]
            if stream.error is not None:
                continue
            rows = where[seg.offset : seg.offset + seg.count]
            positions = np.arange(seg.first, seg.first + seg.count, dtype=np.int64)
            if payload.bad is not None or payload.skipped is not None:
                keep = np.ones(seg.count, dtype=bool)
                for j in range(seg.count):
                    r = int(rows[j])
                    if payload.bad is not None and r in payload.bad:
                        stream.error = payload.bad[r]
                        keep[j:] = False
                        break
                    if payload.skipped is not None and r in payload.skipped:
                        keep[j] = False
                rows, positions = rows[keep], positions[keep]
            if len(rows) == 0:
                continue
            chunk = None if payload.chunk is None else payload.chunk[rows]
            stream.append(
                payload.values, payload.starts[rows], payload.lengths[rows], positions, self.eos, chunk
            )
            added += len(rows)
        self.counters.add(ready_rows=added)


SplitProgress = tuple[int, int, np.ndarray, np.ndarray]
"""One owned split's live packed progress: (consumed, emitted, buffer tokens, buffer starts)."""


class PackCursor:
    """The live position of one packed iteration: exact packed progress of the owned splits, lazy
    inside a chunk (the checkpoint record is ``_checkpoint.PackedState``)."""

    def __init__(self, streams: list[SplitStream]) -> None:
        self.streams = streams
        self._lock = threading.Lock()
        self._chunk: list[ChunkSplit] | None = None
        self.cursor = 0
        self.length = 0
        self.final: list[SplitProgress] | None = None

    def begin(self, records: list[ChunkSplit], length: int) -> None:
        with self._lock:
            self._chunk = records
            self.cursor = 0
            self.length = length

    def end(self, complete: bool, counters: Counters) -> None:
        """The chunk is over; when it was left early, its progress so far becomes final.

        Counts the documents the chunk pulled up to the last block handed out (atomically).
        """
        with self._lock:
            docs = self._docs_pulled()
            if not complete:
                self.final = self._current()
            self._chunk = None
            self.cursor = 0
            counters.add(ready_rows=-docs, consumed_rows=docs, rows_delivered=docs)

    def locked(self) -> threading.Lock:
        """Held while counters and cursor must be read together."""
        return self._lock

    def _docs_pulled(self) -> int:
        if self._chunk is None or self.cursor == 0:
            return 0
        cycle = (self.cursor - 1) // len(self._chunk)
        return int(sum(int(r.docs[cycle]) for r in self._chunk))

    def docs_pulled(self) -> int:
        """Documents the current chunk pulled so far (not yet in the counters); hold ``locked()``."""
        return self._docs_pulled()

    def current(self) -> list[SplitProgress]:
        """Per owned split: (consumed, emitted, buffer tokens, buffer starts); the buffers are
        arrays that are never written (views of the stream, or copies)."""
        with self._lock:
            return self._current()

    def _current(self) -> list[SplitProgress]:
        if self.final is not None:
            return self.final
        if self._chunk is None:
            return [_plain_state(s) for s in self.streams]
        if self.cursor == 0:
            return [_record_state(r, 0, None, self.length) for r in self._chunk]
        cycle, split = divmod(self.cursor - 1, len(self._chunk))
        return [
            _record_state(r, cycle + (1 if i <= split else 0), cycle, self.length)
            for i, r in enumerate(self._chunk)
        ]


def _plain_state(stream: SplitStream) -> SplitProgress:
    stream._settle()
    buffer = stream.tokens[: stream.pulled]
    starts = stream.starts[stream.starts < stream.pulled]
    return stream.consumed, stream.emitted, buffer, starts


def _record_state(record: ChunkSplit, emitted_rel: int, fill_cycle: int | None, length: int) -> SplitProgress:
    consumed, pulled, at_block, at_end = record.marks(length)
    fill = -1 if fill_cycle is None else fill_cycle  # -1: the chunk's start
    lo = emitted_rel * length
    hi = max(lo, min(pulled[fill], len(record.tokens)))
    buffer = record.tokens[lo:hi]
    # the starts are ascending, so the first at or after hi is the later of lo's and the buffer end's
    first = at_block[emitted_rel]
    starts = record.starts[first : max(first, at_end[fill])] - lo
    return consumed[fill], record.emitted0 + emitted_rel, buffer, starts


def _cycles_ready(pipeline: Pipeline, feed: PackFeed, i: int, length: int, at_least: int = 1) -> int | None:
    """Cycles owned split ``i`` can complete, fetching as needed (``None``: unlimited, it only pads;
    0: it must raise its document's error). It fetches until ``at_least`` cycles are ready where
    the pipeline has a unit in flight; with none in flight, what is ready (at least one) will do."""
    stream = feed.streams[i]
    while True:
        exhausted = pipeline.fetched_all(i) and stream.error is None
        got = stream.available_cycles(length, exhausted)
        if got is None or got >= at_least or stream.error is not None:
            return got  # with an error, nothing past it is fetched (0: raise it now)
        unit = pipeline.next_unit()
        if unit is None and got:
            return got
        if unit is None:
            # A split not fetched in full has a unit in flight; one fetched in full is exhausted
            # (available_cycles returned None above), so this cannot happen.
            raise RuntimeError(f"internal error: packed split {i} starved with nothing in flight")
        feed.distribute(unit[0], unit[1])


def _replay(
    pipeline: Pipeline,
    feed: PackFeed,
    targets: list[int | None],
    length: int,
    pad: int,
    counters: Counters,
    most: int = MAX_CHUNK_CYCLES,
) -> None:
    """Emit, without yielding, the blocks of each projected split up to its target block count
    (``most`` cycles at a time)."""
    for i, target in enumerate(targets):
        stream = feed.streams[i]
        while target is not None and stream.emitted < target:
            got = _cycles_ready(pipeline, feed, i, length)
            if got == 0:
                assert stream.error is not None
                raise ValueError(
                    f"a packed split cannot reach the {target} blocks its checkpoint infers (a document "
                    f"that must raise comes first: {stream.error}); the rank that saved the checkpoint was "
                    "not in lockstep with this split's owner; merge every rank's state instead"
                ) from stream.error
            k = min(most, target - stream.emitted, got if got is not None else target)
            _, _, record = emit_cycles(stream, k, length, pad)
            counters.add(ready_rows=-int(record.docs[-1]))


def block(ids: np.ndarray, doc_ids: np.ndarray, row: int) -> dict[str, torch.Tensor]:
    """A yielded block, row ``row`` of its chunk: ``{"input_ids", "doc_ids"}`` tensors over the
    chunk's rows."""
    return {"input_ids": torch.from_numpy(ids[row]), "doc_ids": torch.from_numpy(doc_ids[row])}


Item = TypeVar("Item")

ChunkRow = tuple[np.ndarray, np.ndarray, int]
"""A block as its chunk's ``(k, L)`` arrays (``input_ids``, ``doc_ids``) and its row in them."""


def chunk_row(ids: np.ndarray, doc_ids: np.ndarray, row: int) -> ChunkRow:
    """A block for a loader's packed batches: consecutive rows of one chunk can be handed out as
    one view (``_columnar.stacked``)."""
    return ids, doc_ids, row


def _catch_up(
    pipeline: Pipeline,
    feed: PackFeed,
    length: int,
    pad: int,
    counters: Counters,
    make: Callable[[np.ndarray, np.ndarray, int], Item],
) -> Iterator[Item]:
    """Lagging splits emit one block at a time in (emitted, split) order until all are level."""
    streams = feed.streams
    top = max(s.emitted for s in streams)
    lagging = [(s.emitted, i) for i, s in enumerate(streams) if s.emitted < top]
    heapq.heapify(lagging)
    while lagging:
        count, i = heapq.heappop(lagging)
        if _cycles_ready(pipeline, feed, i, length) == 0:
            error = streams[i].error
            assert error is not None
            raise error
        ids, doc_ids, record = emit_cycles(streams[i], 1, length, pad)
        docs = int(record.docs[0])
        counters.add(ready_rows=-docs, consumed_rows=docs, rows_delivered=docs)
        if count + 1 < top:
            heapq.heappush(lagging, (count + 1, i))
        yield make(ids, doc_ids, 0)


def iterate(
    pipeline: Pipeline,
    feed: PackFeed,
    progress: PackCursor,
    *,
    length: int,
    pad: int,
    budget: int,
    counters: Counters,
    read_ahead_bytes: int,
    targets: list[int | None] | None = None,
    make: Callable[[np.ndarray, np.ndarray, int], Item],
    align: int = 1,
) -> Generator[Item, None, None]:
    """Yield the blocks of the owned splits in canonical order, each made by ``make(input_ids,
    doc_ids, row)`` from its chunk's ``(k, L)`` arrays (``block``: ``{"input_ids", "doc_ids"}``
    tensors; ``chunk_row`` for a loader's packed batches).

    Projected splits first replay their blocks up to ``targets`` (not yielded); then lagging
    splits catch up one block at a time; then every cycle yields one block per owned split, k
    cycles at a time with k within ``read_ahead_bytes`` and ``CHUNK_SPLIT_BYTES`` a split (at least
    one cycle; the split cap is at least one batch, ``align`` cycles). With ``align > 1``
    (one owned split, batches of ``align`` blocks) a chunk ends on a batch boundary where it can,
    so a batch lies in one chunk: ``k`` is the largest count within those limits that does, and
    the split fetches until the next boundary is ready where it has reads in flight. Which blocks
    come out never depends on ``k``.
    """
    streams = feed.streams
    n = len(streams)
    assert align == 1 or n == 1, "chunks end on batch boundaries only with one owned split"
    cycle_bytes = n * length * BLOCK_BYTES_PER_TOKEN
    split_cap = max(align, CHUNK_SPLIT_BYTES // (length * BLOCK_BYTES_PER_TOKEN))
    most = max(1, min(read_ahead_bytes // cycle_bytes, split_cap))
    if targets is not None:
        _replay(pipeline, feed, targets, length, pad, counters, min(most * n, MAX_CHUNK_CYCLES))
    first = streams[0].emitted  # one owned split has no catch-up: blocks handed = emitted - first
    yield from _catch_up(pipeline, feed, length, pad, counters, make)
    while streams[0].emitted < budget:
        left = budget - streams[0].emitted
        to_boundary = min(left, align - (streams[0].emitted - first) % align)
        ready: list[int | None] = []
        for i in range(n):
            got = _cycles_ready(pipeline, feed, i, length, to_boundary)
            if got == 0:
                error = streams[i].error
                assert error is not None
                raise error
            ready.append(got)
        finite = [r for r in ready if r is not None]
        k = min([MAX_CHUNK_CYCLES, most, left, *finite])
        if k > to_boundary:  # end on a batch boundary (k stays >= to_boundary >= 1)
            k -= (k - to_boundary) % align
        cut = [emit_cycles(stream, k, length, pad) for stream in streams]
        progress.begin([record for _, _, record in cut], length)
        feed.chunk_bytes = k * cycle_bytes
        complete = False
        try:
            for c in range(k):
                for i in range(n):
                    ids, doc_ids, _ = cut[i]
                    progress.cursor += 1
                    yield make(ids, doc_ids, c)
            complete = True
        finally:
            progress.end(complete, counters)
            feed.chunk_bytes = 0
            del cut
