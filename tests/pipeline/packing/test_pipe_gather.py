"""How documents get into a packed stream: reads in row-id order, then one gather with EOS.

A packed pipeline reads each unit's rows sorted by row id (``Unit.where`` maps them back) and
copies every document, followed by EOS, into its split's stream: with the compiled ``_native``
module where it was built, else with numpy in one of three ways: when documents are long, one
masked assignment per run of consecutive rows, or one slice per document when the runs are short;
one vectorized index pass when documents are short. Every copy test runs both paths (``PATHS``)
against a plain Python construction; whole epochs are compared with the executable spec in
packing/test_pipe_packing.py (with the compiled path where it was built).
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, strategies as st

from elastic_loader._pipeline import _documents, _fetch, _packing
from elastic_loader._pipeline._documents import LOOP_MIN_DOC_TOKENS, DocPayload, Fetched, make_doc_stage

EOS, PAD = -1, -2
PATHS = ["compiled", "numpy"]
NATIVE = _documents.load_native()


def _native() -> tuple[Callable[..., None], Callable[..., None]]:
    """The compiled ``(gather, doc_ids)``; the test skips where the module is not built or is off."""
    if NATIVE is None:
        pytest.skip("the compiled _native module is not built or is switched off")
    return NATIVE


@contextmanager
def copy_path(path: str) -> Iterator[None]:
    """Packing's copy and ``doc_ids`` through the compiled module or through numpy, for the ``with``
    body."""
    wanted = _native() if path == "compiled" else (None, None)
    saved = _documents.native_gather, _documents.native_doc_ids
    _documents.native_gather, _documents.native_doc_ids = wanted
    try:
        yield
    finally:
        _documents.native_gather, _documents.native_doc_ids = saved


def _copy(part: Fetched, out: np.ndarray, path: str) -> None:
    with copy_path(path):
        part.copy_into(out)


def test_the_compiled_module_is_built_and_used() -> None:
    """An install with a C compiler builds ``_native`` and the pipeline calls it; only
    ``ELASTIC_LOADER_NATIVE=0`` switches it off (then every compiled case here skips)."""
    if os.environ.get(_documents.NATIVE_ENV) == "0":
        assert _documents.native_gather is None and _documents.native_doc_ids is None
        return
    from elastic_loader._pipeline import _native

    assert _documents.native_gather is _native.gather and _documents.native_doc_ids is _native.doc_ids


def _fetched(docs: list[list[int]], picks: list[int]) -> Fetched:
    """Documents ``picks`` (in that order) of a batch holding ``docs`` back to back."""
    lengths = np.array([len(d) for d in docs], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    values = np.array([t for d in docs for t in d], dtype=np.int64)
    sizes = lengths[picks] + 1
    positions = np.arange(len(picks), dtype=np.int64)
    return Fetched([values], offsets[:-1][picks], sizes, np.cumsum(sizes), positions, EOS)


def _expected(docs: list[list[int]], picks: list[int]) -> list[int]:
    return [t for p in picks for t in [*docs[p], EOS]]


@st.composite
def batches(draw: st.DrawFn) -> tuple[list[list[int]], list[int]]:
    longest = draw(st.sampled_from([3, 40, 4 * LOOP_MIN_DOC_TOKENS]))
    n = draw(st.integers(1, 40))
    lengths = draw(st.lists(st.integers(0, longest), min_size=n, max_size=n))
    docs = [[1000 * i + j for j in range(length)] for i, length in enumerate(lengths)]
    if draw(st.booleans()):  # runs of consecutive rows, as a clumped order reads them
        cuts = sorted(draw(st.lists(st.integers(0, n), min_size=2, max_size=6, unique=True)))
        runs = [list(range(a, b)) for a, b in zip(cuts[::2], cuts[1::2])]
        picks = [p for run in draw(st.permutations(runs)) for p in run] or [0]
    else:
        picks = draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=n, unique=True))
    return docs, picks


@pytest.mark.parametrize("path", PATHS)
@given(batch=batches())
def test_documents_are_copied_in_the_order_asked_each_followed_by_eos(
    path: str, batch: tuple[list[list[int]], list[int]]
) -> None:
    docs, picks = batch
    part = _fetched(docs, picks)
    out = np.full(int(part.ends[-1]), 7, dtype=np.int64)
    _copy(part, out, path)
    assert out.tolist() == _expected(docs, picks)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("size", [LOOP_MIN_DOC_TOKENS - 2, LOOP_MIN_DOC_TOKENS - 1, LOOP_MIN_DOC_TOKENS])
def test_both_copy_paths_around_the_threshold(size: int, path: str) -> None:
    """Mean sizes (EOS included) just below, at and above the threshold; the last document's
    EOS index lies one past the end of the batch's values."""
    docs = [[5] * (size - 1), [6] * (size - 1), [7] * (size - 1)]
    picks = [2, 0, 1, 2][:3]
    part = _fetched(docs, picks)
    out = np.empty(int(part.ends[-1]), dtype=np.int64)
    _copy(part, out, path)
    assert out.tolist() == _expected(docs, picks)


RUNS = [[range(0, 20)], [range(10, 20), range(0, 10)], [range(3, 12), range(15, 16)]]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("runs", RUNS)
def test_runs_of_consecutive_rows_are_copied_as_runs(runs: list[range], path: str) -> None:
    """Long documents that lie one after another in the read (one run, or runs in another order,
    one of a single document) are copied run by run, each document followed by EOS."""
    docs = [[1000 * i + j for j in range(2 * LOOP_MIN_DOC_TOKENS + i)] for i in range(20)]
    docs[4] = []  # an empty document inside a run
    picks = [p for run in runs for p in run]
    part = _fetched(docs, picks)
    out = np.full(int(part.ends[-1]), 7, dtype=np.int64)
    _copy(part, out, path)
    assert out.tolist() == _expected(docs, picks)


@st.composite
def batched(draw: st.DrawFn) -> tuple[list[list[int]], list[int], list[int]]:
    """Documents, picks, and the cuts that split the documents into the read's batches."""
    docs, picks = draw(batches())
    cuts = sorted(draw(st.lists(st.integers(1, max(1, len(docs) - 1)), max_size=4, unique=True)))
    return docs, picks, [c for c in cuts if c < len(docs)]


@pytest.mark.parametrize("path", PATHS)
@given(read=batched())
def test_documents_of_several_batches_are_copied_from_their_own(
    path: str, read: tuple[list[list[int]], list[int], list[int]]
) -> None:
    """A read that came in several Arrow batches (range scans) keeps each batch's tokens where they
    are; every document is copied from its own batch, runs of consecutive rows never across two."""
    docs, picks, cuts = read
    bounds = [0, *cuts, len(docs)]
    values = [
        np.array([t for d in docs[a:b] for t in d], dtype=np.int64) for a, b in itertools.pairwise(bounds)
    ]
    batch = [int(np.searchsorted(bounds, p, side="right")) - 1 for p in picks]
    lo = [sum(len(d) for d in docs[bounds[b] : p]) for b, p in zip(batch, picks)]
    sizes = np.array([len(docs[p]) + 1 for p in picks], dtype=np.int64)
    part = Fetched(
        values,
        np.array(lo, dtype=np.int64),
        sizes,
        np.cumsum(sizes),
        np.arange(len(picks), dtype=np.int64),
        EOS,
        np.array(batch, dtype=np.int64),
    )
    out = np.full(int(part.ends[-1]), 7, dtype=np.int64)
    _copy(part, out, path)
    assert out.tolist() == _expected(docs, picks)


def _payload_docs(payload: DocPayload) -> list[list[int]]:
    """Each row's tokens, from the payload's arrays."""
    batch = np.zeros(len(payload.lengths), dtype=np.int64) if payload.chunk is None else payload.chunk
    return [
        payload.values[int(c)][int(a) : int(a) + int(n)].tolist()
        for c, a, n in zip(batch, payload.starts, payload.lengths)
    ]


@pytest.mark.parametrize("length", [3, 2 * LOOP_MIN_DOC_TOKENS])
@pytest.mark.parametrize("kind", [pa.list_(pa.int64()), pa.large_list(pa.int64()), pa.list_(pa.uint64())])
def test_the_document_stage_reads_a_read_of_several_batches_as_one(length: int, kind: pa.DataType) -> None:
    """Long documents in several batches keep an array per batch, short ones are joined into one;
    either way each row's tokens and the rows flagged (a null list whose offsets span tokens, a null
    token, a token too large for int64 where the type allows one) are those of the same rows in one
    batch. The batches are slices of one array, as a scan's may be."""
    lists: list[list[int | None]] = [[100 * i + j for j in range(length + i)] for i in range(10)]
    lists[6] = [*range(length), None]
    if pa.types.is_unsigned_integer(kind.value_type):
        lists[8] = [2**64 - 1]
    offsets = np.cumsum([0, *(len(x) for x in lists)])
    null_list = np.zeros(len(lists), dtype=bool)
    null_list[2] = True  # its offsets still span its tokens
    large = pa.types.is_large_list(kind)
    whole = (pa.LargeListArray if large else pa.ListArray).from_arrays(
        pa.array(offsets, pa.int64() if large else pa.int32()),
        pa.array([t for x in lists for t in x], kind.value_type),
        mask=pa.array(null_list),
    )
    whole = whole.slice(1)  # the read starts at the array's second row
    cuts = [(0, 3), (3, 1), (4, 5)]
    several = pa.Table.from_batches([pa.record_batch({"tokens": whole.slice(a, n)}) for a, n in cuts])
    one = pa.Table.from_batches([pa.record_batch({"tokens": whole})])
    stage = make_doc_stage("skip", _packing.Counters())
    got, want = stage.run(several), stage.run(one)
    assert len(got.values) == (3 if length > LOOP_MIN_DOC_TOKENS else 1)
    flagged = {1, 5} | ({7} if pa.types.is_unsigned_integer(kind.value_type) else set())
    assert got.skipped == want.skipped == flagged
    assert got.bad is None and want.bad is None
    keep = [r for r in range(9) if r not in flagged]
    docs_got, docs_want = _payload_docs(got), _payload_docs(want)
    assert [docs_got[r] for r in keep] == [docs_want[r] for r in keep] == [lists[r + 1] for r in keep]


@pytest.mark.parametrize("path", PATHS)
def test_a_batch_of_empty_documents_is_all_eos(path: str) -> None:
    part = _fetched([[], [], []], [1, 2])
    out = np.full(2, 0, dtype=np.int64)
    _copy(part, out, path)
    assert out.tolist() == [EOS, EOS]


def test_a_sorted_read_maps_every_position_back_to_its_row() -> None:
    """``Unit.where`` of a sorted-read pipeline points each unit position at its batch row."""
    seen: list[np.ndarray] = []

    class Recording:
        def take(self, row_ids: np.ndarray, columns: list[str] | None) -> pa.Table:
            seen.append(row_ids.copy())
            return pa.table({"id": pa.array(row_ids, pa.int64())})

    splits = [np.array([9, 2, 7]), np.array([4, 8, 1])]
    stage = _fetch.Stage(lambda b: b.column(0).to_numpy(), lambda parts: parts[0][1], None)
    pipe = _fetch.Pipeline(
        reader=Recording(),
        columns=None,
        split_rows=splits,
        start=[0, 0],
        stage=stage,
        want=lambda i, unit_rows, inflight: 3,
        counters=_packing.Counters(),
        limits=_fetch.ReadLimits(io_queue_depth=1, transform_threads=1, min_unit_rows=8),
        sorted_reads=True,
    )
    try:
        got = pipe.next_unit()
        assert got is not None
        unit, rows = got
    finally:
        pipe.close()
    assert seen[0].tolist() == [1, 2, 4, 7, 8, 9]
    assert unit.where is not None
    assert rows[unit.where].tolist() == [9, 2, 7, 4, 8, 1]


INT64 = np.int64
BAD_CALLS = [
    # (values, chunk, lo, sizes, out length, error): each is refused before anything is written
    ([np.arange(10, dtype=INT64)], None, [8], [4], 4, ValueError),  # reads past the values
    ([np.arange(10, dtype=INT64)], None, [-1], [2], 2, ValueError),  # a negative start
    ([np.arange(10, dtype=INT64)], None, [0], [0], 0, ValueError),  # a size without its EOS slot
    ([np.arange(10, dtype=INT64)], None, [0], [-(2**63)], 0, ValueError),  # a size that would wrap
    ([np.arange(10, dtype=INT64)], None, [2**62], [2**62], 0, ValueError),  # sums past int64
    ([np.arange(10, dtype=INT64)], None, [0, 2], [3, 3], 5, ValueError),  # more slots than out has
    ([np.arange(10, dtype=INT64)], None, [0], [3], 4, ValueError),  # out not filled exactly
    ([np.arange(10, dtype=INT64)], [1], [0], [3], 3, ValueError),  # a batch that is not there
    ([np.arange(10, dtype=INT64)], [0, 0], [0], [3], 3, ValueError),  # chunk of another length
    ([], None, [], [], 0, ValueError),  # no values at all
    ([np.arange(10, dtype=np.int32)], None, [0], [3], 3, TypeError),  # not int64
    ([np.arange(10, dtype=INT64)[::2]], None, [0], [3], 3, ValueError),  # not contiguous (numpy's own error)
]


@pytest.mark.parametrize(("values", "chunk", "lo", "sizes", "slots", "error"), BAD_CALLS)
def test_the_compiled_copy_refuses_what_it_cannot_copy_exactly(
    values: list[np.ndarray],
    chunk: list[int] | None,
    lo: list[int],
    sizes: list[int],
    slots: int,
    error: type[Exception],
) -> None:
    gather, _ = _native()
    out = np.full(slots, 7, dtype=INT64)
    with pytest.raises(error):
        gather(
            values,
            None if chunk is None else np.array(chunk, dtype=INT64),
            np.array(lo, dtype=INT64),
            np.array(sizes, dtype=INT64),
            out,
            EOS,
        )
    assert (out == 7).all()


def test_the_compiled_copy_refuses_a_read_only_out() -> None:
    gather, _ = _native()
    out = np.zeros(3, dtype=INT64)
    out.flags.writeable = False
    with pytest.raises((BufferError, ValueError)):
        gather([np.arange(5, dtype=INT64)], None, np.array([0], INT64), np.array([3], INT64), out, EOS)


@st.composite
def block_starts(draw: st.DrawFn) -> tuple[list[int], int, int]:
    """Sorted distinct document starts inside ``k`` blocks of ``length`` tokens."""
    k, length = draw(st.integers(1, 6)), draw(st.integers(1, 40))
    starts = draw(st.lists(st.integers(0, k * length - 1), unique=True, max_size=k * length))
    return sorted(starts), k, length


def _doc_ids_by_hand(starts: list[int], k: int, length: int) -> list[list[int]]:
    """In each row, how many starts lie at offsets 1..j of it (the definition)."""
    return [
        [sum(1 for s in starts if row * length < s <= row * length + j) for j in range(length)]
        for row in range(k)
    ]


@pytest.mark.parametrize("path", PATHS)
@given(case=block_starts())
def test_doc_ids_count_the_document_starts_of_each_block(path: str, case: tuple[list[int], int, int]) -> None:
    starts, k, length = case
    with copy_path(path):
        got = _packing._doc_ids(np.array(starts, dtype=INT64), k, length)
    assert got.shape == (k, length)
    assert got.tolist() == _doc_ids_by_hand(starts, k, length)


BAD_STARTS = [
    ([3, 2], 2, 4, ValueError),  # not ascending
    ([2, 2], 2, 4, ValueError),  # a start twice
    ([-1], 2, 4, ValueError),  # before the blocks
    ([8], 2, 4, ValueError),  # past them
    ([1], 7, 4, ValueError),  # out is not whole blocks
    ([1], 8, 0, ValueError),  # blocks of no tokens
]


@pytest.mark.parametrize(("starts", "slots", "length", "error"), BAD_STARTS)
def test_the_compiled_doc_ids_refuse_starts_they_cannot_place(
    starts: list[int], slots: int, length: int, error: type[Exception]
) -> None:
    _, doc_ids = _native()
    out = np.full(slots, 7, dtype=INT64)
    with pytest.raises(error):
        doc_ids(np.array(starts, dtype=INT64), out, length)
    assert (out == 7).all()
