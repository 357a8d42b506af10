"""How documents get from a read into a packed split's stream.

Rules:
* The document stage (a transform thread) turns a unit's token lists into flat ``int64``
  arrays with each row's array, start and length, and flags the rows that must raise or be
  dropped (null lists or tokens, tokens too large for ``int64``): ``_faults`` decides which. A
  read that came in several Arrow batches (range scans) keeps one array per batch when its
  documents are long (``LOOP_MIN_DOC_TOKENS`` on average), so their tokens are copied once, into
  the stream; short documents are joined into one array first.
* A split's documents are appended to its stream as a ``Fetched`` part and copied in only when
  the blocks being cut need them, each followed by EOS, in the split's order: by the compiled
  ``_native`` module (one ``memcpy`` a document, without the GIL) when it was built, else with
  numpy: long documents (``LOOP_MIN_DOC_TOKENS`` on average) one slice each, or one masked
  assignment per run of consecutive rows when the runs average ``MIN_RUN_DOCS`` documents or more
  (clumped orders); short documents with one index per token. Both give the same stream;
  ``ELASTIC_LOADER_NATIVE=0`` in the environment picks numpy (for ``doc_ids`` too).
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ._faults import OnError, forgiving, report_dropped
from ._fetch import Stage
from ._stats import Counters

INT64_MAX = 2**63 - 1
NULL_TOKENS = "pack_sequences does not support null token lists or null token values"
TOO_LARGE = "token value does not fit in int64"


@dataclass
class DocPayload:
    values: list[np.ndarray]  # flat tokens of every row (bad rows included, null lists empty), by read batch
    chunk: np.ndarray | None  # the batch of each row (None: there is one, values[0])
    starts: np.ndarray  # where each row's tokens begin in its batch's values
    lengths: np.ndarray  # tokens per row
    bad: dict[int, BaseException] | None  # rows that raise
    skipped: set[int] | None  # rows dropped


def _token_arrays(read: pa.RecordBatch | pa.Table) -> tuple[list[pa.Array], np.ndarray]:
    """The token-list column of a read as arrays, with every row's length (null lists 0): one
    array per batch when the documents are long enough to be copied a slice each, else (or when
    there is one batch) one array."""
    column = read.column(0)
    lengths = pc.list_value_length(column).fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    if isinstance(column, pa.Array):
        return [column], lengths
    arrays = [array for array in column.chunks if len(array)] or [column.combine_chunks()]
    if len(arrays) > 1 and not _long_documents(int(lengths.sum()) + len(lengths), len(lengths)):
        arrays = [pa.concat_arrays(arrays)]
    return arrays, lengths


def _flagged(column: pa.Array | pa.ChunkedArray) -> dict[int, str]:
    """Rows whose token list is null."""
    if not column.null_count:
        return {}
    problem = np.asarray(column.is_null().to_numpy(zero_copy_only=False), dtype=bool)
    return {int(r): NULL_TOKENS for r in np.flatnonzero(problem)}


def _values(
    array: pa.Array, lengths: np.ndarray, first: int, reasons: dict[int, str]
) -> tuple[np.ndarray, np.ndarray]:
    """The tokens of ``array`` (rows ``first`` on) as ``int64`` values in place (a list array's
    child, uncopied) and each row's start in them; rows with a null token or one too large for
    ``int64`` are added to ``reasons``."""
    if pa.types.is_fixed_size_list(array.type):  # no offsets: its values without null lists
        flat = array.flatten()
        starts = np.cumsum(lengths) - lengths
    else:  # the child as it is, uncopied (a null list's length is 0 whatever its offsets)
        flat = array.values
        starts = array.offsets.to_numpy(zero_copy_only=False)[:-1].astype(np.int64)
    ends = starts + lengths
    if flat.null_count:
        per_row = _per_row(
            np.asarray(flat.is_null().to_numpy(zero_copy_only=False), dtype=bool), starts, ends
        )
        for r in np.flatnonzero(per_row):
            reasons.setdefault(first + int(r), NULL_TOKENS)
    # without nulls the tokens are used in place (fill_null would copy them)
    values = (flat.fill_null(0) if flat.null_count else flat).to_numpy(zero_copy_only=False)
    if values.dtype == np.uint64 and values.size and values.max() > INT64_MAX:
        per_row = _per_row(values > INT64_MAX, starts, ends)
        for r in np.flatnonzero(per_row):
            reasons.setdefault(first + int(r), TOO_LARGE)
    # too-large tokens wrap here, but only in flagged documents, which are never emitted
    tokens: np.ndarray = values.astype(np.int64, copy=False)
    return tokens, starts


def make_doc_stage(on_error: OnError, counters: Counters) -> Stage:
    """The packing transform stage: token lists to flat int64 arrays, bad documents flagged."""
    forgive = forgiving(on_error)

    def run(read: pa.RecordBatch | pa.Table) -> DocPayload:
        t0 = time.perf_counter_ns()
        arrays, lengths = _token_arrays(read)
        reasons = _flagged(read.column(0))
        first = np.cumsum([0, *(len(array) for array in arrays)])
        values, starts = [], []
        for array, a, b in zip(arrays, first[:-1].tolist(), first[1:].tolist()):
            tokens, at = _values(array, lengths[a:b], a, reasons)
            values.append(tokens)
            starts.append(at)
        chunk = None
        if len(arrays) > 1:
            chunk = np.repeat(np.arange(len(arrays), dtype=np.int64), np.diff(first))
        bad: dict[int, BaseException] = {}
        skipped: set[int] = set()
        dropped: list[Exception] = []
        for row in sorted(reasons):
            exc = ValueError(reasons[row])
            if forgive(exc):
                skipped.add(row)
                dropped.append(exc)
            else:
                bad[row] = exc
        report_dropped(on_error, dropped, read.num_rows, "documents whose tokens were invalid", counters)
        counters.add(transform_ns=time.perf_counter_ns() - t0)
        row_starts = starts[0] if len(starts) == 1 else np.concatenate(starts)
        return DocPayload(values, chunk, row_starts, lengths, bad or None, skipped or None)

    def combine(parts: list[tuple[int, DocPayload]]) -> DocPayload:
        assert len(parts) == 1, "packing transforms a unit as one slice"
        return parts[0][1]

    return Stage(run, combine, None, one_batch=False)


def _per_row(flags: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """For each row ``[start, end)`` of ``flags``, whether any flag is set."""
    cumulative = np.concatenate([[0], np.cumsum(flags, dtype=np.int64)])
    result: np.ndarray = (cumulative[ends] - cumulative[starts]) > 0
    return result


LOOP_MIN_DOC_TOKENS = 256
"""Mean document size (EOS included) from which documents are copied one slice each."""


def _long_documents(slots: int, docs: int) -> bool:
    """Whether ``docs`` documents filling ``slots`` tokens (EOS included) are long: copied a slice
    each (or a run at a time), and kept in their read's batches."""
    return slots >= LOOP_MIN_DOC_TOKENS * docs


NATIVE_ENV = "ELASTIC_LOADER_NATIVE"
"""``ELASTIC_LOADER_NATIVE=0`` in the environment makes packing copy documents and write ``doc_ids``
with numpy even where the compiled ``_native`` module was built."""


def load_native() -> tuple[Callable[..., None], Callable[..., None]] | None:
    """The compiled ``(gather, doc_ids)``, or ``None`` (not built: the extension is optional; or
    switched off by ``NATIVE_ENV``)."""
    if os.environ.get(NATIVE_ENV, "1") == "0":
        return None
    try:
        from ._native import doc_ids, gather
    except ImportError:
        return None
    return gather, doc_ids


native_gather, native_doc_ids = load_native() or (None, None)
"""What ``Fetched.copy_into`` and ``_packing``'s ``doc_ids`` call unless ``None``:
``gather(values, chunk, lo, sizes, out, eos)`` and ``doc_ids(starts, out, length)``."""


@dataclass
class Fetched:
    """Documents appended to a stream and not yet copied into it: ``sizes[i] - 1``
    tokens from ``values[chunk[i]][lo[i]]`` (``values[0]`` when ``chunk`` is ``None``), then EOS;
    ``ends`` is ``cumsum(sizes)``, and ``positions`` are the documents' split positions."""

    values: list[np.ndarray]
    lo: np.ndarray
    sizes: np.ndarray
    ends: np.ndarray
    positions: np.ndarray
    eos: int
    chunk: np.ndarray | None = None

    def copy_into(self, out: np.ndarray) -> None:
        """Write the documents, each followed by EOS, to ``out`` (``ends[-1]`` slots)."""
        if native_gather is not None:
            native_gather(self.values, self.chunk, self.lo, self.sizes, out, self.eos)
            return
        eos_at = self.ends - 1
        values, lo, sizes, chunk = self.values, self.lo, self.sizes, self.chunk
        if chunk is not None or _long_documents(len(out), len(sizes)):
            # long documents: documents that lie one after another in one batch's values (a run
            # of consecutive rows) are copied by one masked assignment, the rest one slice each
            follows = lo[1:] == lo[:-1] + sizes[:-1] - 1
            if chunk is not None:
                follows &= chunk[1:] == chunk[:-1]
            breaks = np.flatnonzero(~follows) + 1
            if len(breaks) * MIN_RUN_DOCS > len(sizes):  # short runs: a slice a document
                batch = itertools.repeat(0) if chunk is None else chunk.tolist()
                for c, first, size, end in zip(batch, lo.tolist(), sizes.tolist(), self.ends.tolist()):
                    out[end - size : end - 1] = values[c][first : first + size - 1]
            else:
                bounds = [0, *breaks.tolist(), len(sizes)]
                for a, b in itertools.pairwise(bounds):
                    c = 0 if chunk is None else int(chunk[a])
                    _copy_run(out, values[c], lo[a:b], sizes[a:b], eos_at[a:b])
        elif len(values[0]):
            source = np.repeat(lo - (self.ends - sizes), sizes)
            source += np.arange(len(out), dtype=np.int64)
            # an EOS slot's index (lo + length) may lie past the end: "clip" keeps it in range
            # (the slot is overwritten below), and "raise" would buffer `out`
            np.take(values[0], source, out=out, mode="clip")
        out[eos_at] = self.eos


MIN_RUN_DOCS = 8
"""Documents a run of consecutive rows averages, at least, for ``Fetched.copy_into`` to copy runs."""


def _copy_run(
    out: np.ndarray, values: np.ndarray, lo: np.ndarray, sizes: np.ndarray, eos_at: np.ndarray
) -> None:
    """Copy documents that lie one after another in ``values`` (from ``lo[0]``) to ``out``, where
    each is followed by its EOS slot ``eos_at`` (written by the caller): every slot of the run but
    the EOS slots takes the next token."""
    start, end = int(eos_at[0]) - int(sizes[0]) + 1, int(eos_at[-1]) + 1
    keep = np.ones(end - start, dtype=bool)
    keep[eos_at - start] = False
    out[start:end][keep] = values[int(lo[0]) : int(lo[0]) + end - start - len(sizes)]
