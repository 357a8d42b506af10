"""Packing on real tables (``_pipeline/_packing.py``): blocks, states and counters against the spec.

The main corpus here is made of short documents whose length plus EOS often equals the block
length, so blocks and leftovers begin exactly at a document start (the boundary cases of the
buffer's ``starts``); states are compared with the executable spec after every step, over reads of
one row to whole splits and chunks of one cycle to whole epochs. A second corpus of long documents
(hundreds of tokens, some null) takes the stream's one-slice-per-document copy path, which short
documents never reach. The multi-fragment table checks states at every step boundary inside a
chunk and the document counters from chunk to chunk. Origin: most were written to kill surviving
mutants of ``_packing`` (docs/MUTATION.md).
"""

from __future__ import annotations

import itertools
import logging
import random
import time
from typing import Any

import lancedb
import numpy as np
import pyarrow as pa
import pytest
import torch
from lancedb.streaming import StreamingDataset as Reference

from elastic_loader import StreamingDataLoader, StreamingDataset
from elastic_loader._pipeline import _fetch, _packing
from elastic_loader._pipeline._packing import PackCursor, SplitStream, emit_cycles
from elastic_loader._pipeline._stats import Counters
from elastic_loader.spec import Faults, PackingConfig, iterate_packed
from elastic_loader.spec.packing import PackBuffer, PackedState
from elastic_loader.spec.rows import Raised

EOS, PAD, LENGTH = -1, -2, 4
LONG_LENGTH, LONG_DOCS = 512, 48  # the long-document corpus: block length, documents


def _document(i: int) -> list[int]:
    """Lengths cycle 3, 3, 1, 0, 5, 2, 3: with EOS, 4 = LENGTH tokens twice in a row."""
    return [100 * i + j for j in range((3, 3, 1, 0, 5, 2, 3)[i % 7])]


@pytest.fixture(scope="module")
def short_docs(tmp_path_factory: pytest.TempPathFactory) -> Any:
    db = lancedb.connect(str(tmp_path_factory.mktemp("short_docs")))
    data = pa.table(
        {
            "id": pa.array(range(70), pa.int64()),
            "tokens": pa.array([_document(i) for i in range(70)], pa.list_(pa.int64())),
        }
    )
    return db.create_table("short_docs", data)


def _corpus() -> dict[int, tuple[int, ...]]:
    return {i: tuple(_document(i)) for i in range(70)}


def _dataset(
    table: Any, num_splits: int, budget: int, length: int = LENGTH, **kwargs: Any
) -> StreamingDataset:
    return StreamingDataset(
        table,
        num_splits=num_splits,
        columns=["tokens"],
        pack_sequences=length,
        eos_id=EOS,
        pad_id=PAD,
        blocks_per_epoch=budget,
        **kwargs,
    )


@pytest.mark.parametrize("chunk_cycles", [1, 3, 1024])
@pytest.mark.parametrize("read_batch_size", [1, 5, 256])
@pytest.mark.parametrize("num_splits", [1, 2, 3])
def test_state_and_counters_after_every_block_match_the_spec(
    packed_state_of: Any,
    short_docs: Any,
    perm_of: Any,
    monkeypatch: pytest.MonkeyPatch,
    num_splits: int,
    read_batch_size: int,
    chunk_cycles: int,
) -> None:
    """At every step the checkpoint equals the spec's; with one split (a step is one block)
    ``consumed_rows`` and ``rows_delivered`` equal the documents pulled so far."""
    monkeypatch.setattr(_packing, "MAX_CHUNK_CYCLES", chunk_cycles)
    if read_batch_size == 1:
        monkeypatch.setattr(_fetch, "MAX_UNIT_ROWS", 4)
    budget = num_splits * (70 // num_splits + 8)  # more blocks than the tokens fill: padding at the end
    perm = tuple(tuple(s) for s in perm_of(short_docs, num_splits=num_splits))
    start = PackedState((0,) * num_splits, (0,) * num_splits, {})
    model = iterate_packed(
        perm, _corpus(), Faults(), tuple(range(num_splits)), PackingConfig(LENGTH, EOS, PAD, budget), start
    )
    assert any(b.input_ids[-1] == PAD for b in model.blocks)
    ds = _dataset(short_docs, num_splits, budget, read_batch_size=read_batch_size)
    it = iter(ds)
    for k, expected in enumerate(model.blocks):
        block = next(it)
        assert tuple(block["input_ids"].tolist()) == expected.input_ids, k
        assert tuple(block["doc_ids"].tolist()) == expected.doc_ids, k
        if (k + 1) % num_splits:
            continue  # packed checkpoints exist at step boundaries only
        state = model.state_after(k + 1)
        assert packed_state_of(ds.state_dict()) == state, k
        if num_splits == 1:
            assert ds.consumed_rows == sum(state.consumed), k
            assert ds.statistics().rows_delivered == sum(state.consumed), k
    assert list(it) == []
    assert packed_state_of(ds.state_dict()) == model.state_after(len(model.blocks))


@pytest.mark.parametrize(
    ("corpus", "length", "budget", "options"),
    [("short_docs", LENGTH, 60, {}), ("long_docs", LONG_LENGTH, 40, {"on_transform_error": "skip"})],
)
def test_resuming_from_every_block_continues_exactly(
    request: pytest.FixtureRequest, corpus: str, length: int, budget: int, options: dict[str, Any]
) -> None:
    """A checkpoint after any block, resumed in a fresh dataset, gives the rest of the blocks."""
    table = request.getfixturevalue(corpus)
    full = [
        tuple(b["input_ids"].tolist())
        for b in _dataset(table, 2, budget, length, read_batch_size=3, **options)
    ]
    for k in range(0, len(full), 2):  # packed resumes happen at cycle boundaries (whole global steps)
        ds = _dataset(table, 2, budget, length, read_batch_size=3, **options)
        it = iter(ds)
        list(itertools.islice(it, k))
        state = ds.state_dict()
        it.close()
        again = _dataset(table, 2, budget, length, read_batch_size=7, **options)
        again.load_state_dict(state)
        assert [tuple(b["input_ids"].tolist()) for b in again] == full[k:], k


def test_an_unmerged_rank_state_resumes_by_replay_and_without_provenance_is_refused(short_docs: Any) -> None:
    """Rank 0 of two moved splits 0-1: its checkpoint projects rank 1's splits to one block each
    (lockstep, D24), which a world-size-1 dataset replays; the same state without our provenance
    key holds two different block counts and is refused (D24)."""
    whole = [b["input_ids"].tolist() for b in _dataset(short_docs, 4, 40)]
    rank0 = _dataset(short_docs, 4, 40, world_size=2, rank=0)
    list(itertools.islice(iter(rank0), 2))
    state = rank0.state_dict()
    assert state["blocks_emitted_per_split"] == [1, 1, 0, 0]
    assert state["elastic_loader"]["projected"] == {2: 1, 3: 1}
    alone = _dataset(short_docs, 4, 40)
    alone.load_state_dict(state)
    assert [b["input_ids"].tolist() for b in alone] == whole[4:]
    legacy = {k: v for k, v in state.items() if k != "elastic_loader"}
    with pytest.raises(ValueError, match="merge"):
        _dataset(short_docs, 4, 40).load_state_dict(legacy)


@pytest.fixture(scope="module")
def null_docs(tmp_path_factory: pytest.TempPathFactory) -> Any:
    db = lancedb.connect(str(tmp_path_factory.mktemp("null_docs")))
    tokens: list[list[int | None] | None] = [_document(i) for i in range(30)]
    tokens[0], tokens[9], tokens[29] = None, [1, None], None
    data = pa.table({"id": pa.array(range(30), pa.int64()), "tokens": pa.array(tokens, pa.list_(pa.int64()))})
    return db.create_table("null_docs", data)


def test_warn_mode_logs_skipped_documents_with_the_first_error(
    null_docs: Any, caplog: pytest.LogCaptureFixture
) -> None:
    ds = _dataset(null_docs, 1, 20, on_transform_error="warn", read_batch_size=256)
    with caplog.at_level(logging.WARNING, logger="elastic_loader"):
        list(ds)
    messages = [r.getMessage() for r in caplog.records if r.name == "elastic_loader"]
    assert len(messages) == 1, messages
    assert "Skipped 3 of 30 documents" in messages[0] and "null token" in messages[0], messages
    assert ds.rows_skipped == 3


def test_a_callable_error_policy_sees_each_bad_document_error(null_docs: Any) -> None:
    seen: list[BaseException] = []

    def policy(error: Exception) -> bool:
        seen.append(error)
        return True  # skip

    ds = _dataset(null_docs, 2, 20, on_transform_error=policy, read_batch_size=4)
    blocks = list(ds)
    assert blocks and ds.rows_skipped == 3
    assert len(seen) == 3 and all(isinstance(e, ValueError) and "null" in str(e) for e in seen), seen


def test_skip_mode_does_not_log(null_docs: Any, caplog: pytest.LogCaptureFixture) -> None:
    ds = _dataset(null_docs, 1, 20, on_transform_error="skip")
    with caplog.at_level(logging.WARNING, logger="elastic_loader"):
        list(ds)
    assert not [r for r in caplog.records if r.name == "elastic_loader"]
    assert ds.rows_skipped == 3


@pytest.mark.parametrize("budget", [1, 30])
@pytest.mark.parametrize("starts", [(0, 5, 8), (0, 4, 8), (2, 3, 4, 9), ()])
def test_a_loaded_buffer_longer_than_a_block_is_cut_as_the_spec_cuts_it(
    packed_state_of: Any, short_docs: Any, perm_of: Any, starts: tuple[int, ...], budget: int
) -> None:
    """A checkpoint (from any conforming implementation) may hold a buffer of several blocks, with
    documents starting anywhere in it, at a block boundary included: every later state keeps
    exactly the starts of what is left, also once the budget ends the epoch."""
    perm = tuple(tuple(s) for s in perm_of(short_docs, num_splits=1))
    # a buffer the packer can leave: whole documents, each followed by EOS (D26)
    tokens = tuple(EOS if i == 9 or i + 1 in starts else 1000 + i for i in range(10))
    loaded = PackedState((5,), (0,), {0: PackBuffer(tokens, starts)})
    model = iterate_packed(perm, _corpus(), Faults(), (0,), PackingConfig(LENGTH, EOS, PAD, budget), loaded)
    ds = _dataset(short_docs, 1, budget)
    checkpoint = ds.state_dict()
    del checkpoint["elastic_loader"]  # a hand-made checkpoint: no digest
    checkpoint["samples_consumed_per_split"] = [5]
    checkpoint["pack_buffers"] = {0: {"tokens": list(tokens), "starts": list(starts)}}
    ds.load_state_dict(checkpoint)
    assert packed_state_of(ds.state_dict()) == loaded
    it = iter(ds)
    for k, expected in enumerate(model.blocks):
        block = next(it)
        assert tuple(block["input_ids"].tolist()) == expected.input_ids, k
        assert tuple(block["doc_ids"].tolist()) == expected.doc_ids, k
        assert packed_state_of(ds.state_dict()) == model.state_after(k + 1), k
    assert list(it) == []
    assert packed_state_of(ds.state_dict()) == model.state_after(len(model.blocks))


@pytest.fixture
def one_row_per_split(monkeypatch: pytest.MonkeyPatch) -> None:
    """Reads of one document per split: every unit holds one segment per split, several in flight."""
    monkeypatch.setattr(_fetch, "FIRST_UNIT_ROWS", 1)
    monkeypatch.setattr(_fetch, "MAX_UNIT_ROWS", 2)


@pytest.mark.usefixtures("one_row_per_split")
def test_a_skipped_document_does_not_drop_the_other_splits_part_of_its_read(
    null_docs: Any, perm_of: Any
) -> None:
    """A unit whose first segment is all skipped documents still feeds the segments after it."""
    budget = 24
    perm = tuple(tuple(s) for s in perm_of(null_docs, num_splits=2))
    corpus = {i: tuple(_document(i)) for i in range(30)}
    model = iterate_packed(
        perm,
        corpus,
        Faults(skipped=frozenset({0, 9, 29})),
        (0, 1),
        PackingConfig(LENGTH, EOS, PAD, budget),
        PackedState((0, 0), (0, 0), {}),
    )
    ds = _dataset(null_docs, 2, budget, on_transform_error="skip", read_batch_size=1, io_queue_depth=4)
    got = [tuple(b["input_ids"].tolist()) for b in ds]
    assert got == [b.input_ids for b in model.blocks]


@pytest.mark.usefixtures("one_row_per_split")
@pytest.mark.parametrize("seed", [0, 7])
@pytest.mark.parametrize("bad", [0, 9, 29])
def test_a_failed_split_does_not_drop_the_other_splits_part_of_later_reads(
    null_docs: Any, perm_of: Any, bad: int, seed: int
) -> None:
    """After split A fetched a failing document, reads already in flight still feed split B, whose
    blocks up to the raise are the spec's (seed 7 puts document 9 where split B reads ahead)."""
    others = sorted({0, 9, 29} - {bad})
    flt = f"id NOT IN ({', '.join(map(str, others))})"
    budget = 24
    perm = tuple(tuple(s) for s in perm_of(null_docs, num_splits=2, filter=flt, shuffle_seed=seed))
    corpus = {i: tuple(_document(i)) for i in range(30)}
    model = iterate_packed(
        perm,
        corpus,
        Faults(raising=frozenset({bad})),
        (0, 1),
        PackingConfig(LENGTH, EOS, PAD, budget),
        PackedState((0, 0), (0, 0), {}),
    )
    ds = _dataset(null_docs, 2, budget, filter=flt, read_batch_size=1, io_queue_depth=4, shuffle_seed=seed)
    got: list[tuple[int, ...]] = []
    if isinstance(model.end, Raised):
        with pytest.raises(ValueError, match="null"):
            for block in ds:
                got.append(tuple(block["input_ids"].tolist()))
    else:
        got = [tuple(b["input_ids"].tolist()) for b in ds]
    assert got == [b.input_ids for b in model.blocks]


def test_a_read_of_empty_documents_only(
    short_docs: Any, perm_of: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reads of one document: some reads hold no token at all (document 3 of every 7 is empty)."""
    monkeypatch.setattr(_fetch, "FIRST_UNIT_ROWS", 1)
    monkeypatch.setattr(_fetch, "MAX_UNIT_ROWS", 1)
    budget = 70
    perm = tuple(tuple(s) for s in perm_of(short_docs, num_splits=1))
    model = iterate_packed(
        perm, _corpus(), Faults(), (0,), PackingConfig(LENGTH, EOS, PAD, budget), PackedState((0,), (0,), {})
    )
    ds = _dataset(short_docs, 1, budget, read_batch_size=1)
    assert [tuple(b["input_ids"].tolist()) for b in ds] == [b.input_ids for b in model.blocks]


def test_counters_after_the_epoch_ends(short_docs: Any) -> None:
    """Once the epoch is over, every document was pulled, and the cumulative counter says so."""
    ds = _dataset(short_docs, 1, 70 + 8)
    assert len(list(ds)) == 78
    assert ds.state_dict()["samples_consumed_per_split"] == [70]
    assert ds.statistics().rows_delivered == 70


def test_transform_time_is_at_most_the_time_spent_iterating(short_docs: Any) -> None:
    ds = _dataset(short_docs, 2, 80)
    start = time.perf_counter()
    list(ds)
    elapsed = time.perf_counter() - start
    assert 0 < ds.statistics().transform_time <= elapsed


# ---------------------------------------------------------------- long documents


def _long_corpus() -> dict[int, list[int] | None]:
    """Lengths 0..1400 tokens (mean well above the slice threshold); three documents are null."""
    rng = random.Random(5)
    corpus: dict[int, list[int] | None] = {
        i: [10_000 * i + j for j in range(rng.choice([0, 1, 300, 511, 700, 1400]))] for i in range(LONG_DOCS)
    }
    for bad in (3, 17, 40):
        corpus[bad] = None
    return corpus


@pytest.fixture(scope="module")
def long_docs(tmp_path_factory: pytest.TempPathFactory) -> Any:
    db = lancedb.connect(str(tmp_path_factory.mktemp("long_docs")))
    corpus = _long_corpus()
    data = pa.table(
        {
            "id": pa.array(range(LONG_DOCS), pa.int64()),
            "tokens": pa.array([corpus[i] for i in range(LONG_DOCS)], pa.list_(pa.int64())),
        }
    )
    return db.create_table("long_docs", data)


@pytest.mark.parametrize("read_batch_size", [1, 5, 256])
@pytest.mark.parametrize("num_splits", [1, 2, 3])
def test_long_documents_pack_as_the_spec_packs_them(
    long_docs: Any,
    perm_of: Any,
    packed_state_of: Any,
    monkeypatch: pytest.MonkeyPatch,
    num_splits: int,
    read_batch_size: int,
) -> None:
    """Blocks, doc_ids and the checkpoint at every step equal the spec's (null documents skipped)."""
    if read_batch_size == 1:
        monkeypatch.setattr(_fetch, "MAX_UNIT_ROWS", 3)
    corpus = _long_corpus()
    tokens = {i: tuple(d or ()) for i, d in corpus.items()}
    skipped = frozenset(i for i, d in corpus.items() if d is None)
    total = sum(len(d) + 1 for d in corpus.values() if d is not None)
    budget = num_splits * (total // LONG_LENGTH // num_splits + 2)  # the last blocks are padded
    perm = tuple(tuple(s) for s in perm_of(long_docs, num_splits=num_splits))
    start = PackedState((0,) * num_splits, (0,) * num_splits, {})
    model = iterate_packed(
        perm,
        tokens,
        Faults(skipped=skipped),
        tuple(range(num_splits)),
        PackingConfig(LONG_LENGTH, EOS, PAD, budget),
        start,
    )
    ds = _dataset(
        long_docs, num_splits, budget, LONG_LENGTH, read_batch_size=read_batch_size, on_transform_error="skip"
    )
    it = iter(ds)
    for k, expected in enumerate(model.blocks):
        block = next(it)
        assert tuple(block["input_ids"].tolist()) == expected.input_ids, k
        assert tuple(block["doc_ids"].tolist()) == expected.doc_ids, k
        if (k + 1) % num_splits == 0:
            assert packed_state_of(ds.state_dict()) == model.state_after(k + 1), k
    assert list(it) == []
    assert ds.statistics().rows_skipped == len(skipped)


def corpus_of(table: Any) -> dict[int, tuple[int, ...]]:
    data = table.to_arrow()
    return {
        i: () if t is None or None in t else tuple(t)
        for i, t in zip(data.column("id").to_pylist(), data.column("tokens").to_pylist())
    }


def block_key(block: dict[str, Any]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    return tuple(block["input_ids"].tolist()), tuple(block["doc_ids"].tolist())


PACKED_CASES = [
    # (num_splits, world_size, rank, pack_sequences, blocks_per_epoch, read_batch_size)
    (1, 1, 0, 4, 30, 3),
    (2, 1, 0, 3, 40, 4),
    (4, 2, 1, 5, 48, 7),
    (3, 1, 0, 6, 60, 64),
    (2, 2, 0, 2, 50, 1),
]


@pytest.mark.parametrize(("s", "w", "r", "length", "budget", "batch"), PACKED_CASES)
def test_packed_state_at_every_step_matches_the_spec(
    multi_table: Any,
    perm_of: Any,
    packed_state_of: Any,
    units: str,
    s: int,
    w: int,
    r: int,
    length: int,
    budget: int,
    batch: int,
) -> None:
    """Checkpoints taken between steps inside a chunk (buffers, document starts at offset 0, counts).

    Origin: written to kill a surviving mutant (docs/MUTATION.md).
    """
    perm = tuple(tuple(split) for split in perm_of(multi_table, num_splits=s))
    owned = tuple(range(r * s // w, (r + 1) * s // w))
    config = PackingConfig(length, EOS, PAD, budget)
    model = iterate_packed(
        perm, corpus_of(multi_table), Faults(), owned, config, PackedState((0,) * s, (0,) * s)
    )
    ds = StreamingDataset(
        multi_table,
        num_splits=s,
        world_size=w,
        rank=r,
        columns=["tokens"],
        pack_sequences=length,
        eos_id=EOS,
        pad_id=PAD,
        blocks_per_epoch=budget,
        read_batch_size=batch,
    )
    it = iter(ds)
    for k, expected in enumerate(model.blocks):
        if k % len(owned) == 0:
            assert packed_state_of(ds.state_dict()) == model.state_after(k), k
        block = next(it)
        assert block_key(block) == (expected.input_ids, expected.doc_ids), k
        assert block["input_ids"].dtype == block["doc_ids"].dtype == torch.int64
    assert list(it) == []
    assert packed_state_of(ds.state_dict()) == model.state_after(len(model.blocks))


def listed(progress: list[Any]) -> list[tuple[int, int, list[int], list[int]]]:
    """A cursor's live progress with its buffers (arrays) as lists."""
    return [(c, e, list(map(int, tokens)), list(map(int, starts))) for c, e, tokens, starts in progress]


def test_a_packed_chunk_reports_the_old_progress_until_its_first_block() -> None:
    """Between cutting a chunk and handing out its first block, progress is what it was before.

    Origin: written to kill a surviving mutant (docs/MUTATION.md).
    """
    streams = [SplitStream([7, 8], [0], consumed=3, emitted=2), SplitStream([], [], consumed=1, emitted=2)]
    for i, stream in enumerate(streams):
        lengths = np.array([2, 0, 3], dtype=np.int64)
        values = np.arange(10 * i, 10 * i + int(lengths.sum()), dtype=np.int64)
        starts = np.cumsum(lengths) - lengths
        stream.append([values], starts, lengths, np.array([5, 6, 8], dtype=np.int64), EOS)
    progress = PackCursor(streams)
    before = listed(progress.current())
    assert before == [(3, 2, [7, 8], [0]), (1, 2, [], [])]
    records = [emit_cycles(stream, 2, 3, PAD)[2] for stream in streams]
    progress.begin(records, 3)
    assert listed(progress.current()) == before
    # Block 0 of cycle 0 is out: every split's first fill shows (as in the reference), and split 0
    # emitted [7, 8, 0]. Split 0 pulled document 5 (tokens 0, 1 and EOS), split 1 document 5
    # (tokens 10, 11 and EOS); neither needed the empty document 6.
    progress.cursor = 1
    after_one = [(6, 3, [1, EOS], []), (6, 2, [10, 11, EOS], [0])]
    assert listed(progress.current()) == after_one
    progress.end(False, Counters())  # left early: that progress is final
    assert listed(progress.current()) == after_one


def _stream_with_fetched_documents(buffer: list[int]) -> SplitStream:
    """A split holding ``buffer`` (one document starting at 0) and two fetched documents."""
    stream = SplitStream(buffer, [0], consumed=4, emitted=1)
    lengths = np.array([3, 5], dtype=np.int64)
    values = np.arange(100, 100 + int(lengths.sum()), dtype=np.int64)
    stream.append([values], np.cumsum(lengths) - lengths, lengths, np.array([4, 6], dtype=np.int64), EOS)
    return stream


@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_a_chunk_the_stream_covers_is_cut_in_place_and_equals_copying_the_documents_first(k: int) -> None:
    """A stream that already holds the chunk's tokens is cut where it is: the fetched documents
    wait (they are copied in by the chunk that needs them, so tokens a chunk leaves over are
    not copied again), and the blocks, doc_ids and progress are those of copying them in first."""
    length = 4
    buffer = list(range(1, 11))  # 10 tokens: two blocks of 4 and 2 left over
    lazy, eager = _stream_with_fetched_documents(buffer), _stream_with_fetched_documents(buffer)
    held = lazy.tokens
    eager._settle()
    got_ids, got_doc_ids, got_record = emit_cycles(lazy, k, length, PAD)
    want_ids, want_doc_ids, want_record = emit_cycles(eager, k, length, PAD)
    np.testing.assert_array_equal(got_ids, want_ids)
    np.testing.assert_array_equal(got_doc_ids, want_doc_ids)
    for field in ("consumed", "pulled", "docs"):
        np.testing.assert_array_equal(getattr(got_record, field), getattr(want_record, field))
    assert (lazy.consumed, lazy.emitted, lazy.pulled) == (eager.consumed, eager.emitted, eager.pulled)
    if k * length <= len(buffer):  # covered: no new stream was built, the documents still wait
        assert np.shares_memory(got_ids, held)
        assert lazy.stream_len() == eager.stream_len() and lazy.fetched_docs == 2
    # whatever was cut, the rest of the epoch is the same
    rest = [emit_cycles(s, 3, length, PAD)[0].tolist() for s in (lazy, eager)]
    assert rest[0] == rest[1]


def test_packed_counters_across_chunks(multi_table: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """With one cycle per chunk, the document counters stay exact from chunk to chunk.

    The first read holds the whole table (200 documents), so at every step the documents
    waiting (``prefetch_queue_depth``) and those pulled (``consumed_rows``) add up to 200.

    Origin: written to kill a surviving mutant (docs/MUTATION.md).
    """
    monkeypatch.setattr(_packing, "MAX_CHUNK_CYCLES", 1)
    ds = StreamingDataset(
        multi_table,
        num_splits=2,
        columns=["tokens"],
        pack_sequences=3,
        eos_id=EOS,
        pad_id=PAD,
        blocks_per_epoch=100,
    )
    it: Any = iter(ds)  # a generator: closed below
    for step in range(1, 40):
        list(itertools.islice(it, 2))
        state: dict[str, Any] = ds.state_dict()
        pulled = sum(state["samples_consumed_per_split"])
        stats = ds.statistics()
        assert stats.consumed_rows == stats.rows_delivered == pulled, step
        assert stats.prefetch_queue_depth + stats.consumed_rows == 200, step
    it.close()


def test_packed_consumed_rows_counts_pulled_documents(multi_table: Any) -> None:
    """Origin: regression test of a bug the behavioural suite found, now fixed."""
    kwargs = {
        "columns": ["tokens"],
        "pack_sequences": 6,
        "eos_id": 1,
        "pad_id": 0,
        "num_splits": 2,
        "blocks_per_epoch": 200,
    }
    ours, ref = StreamingDataset(multi_table, **kwargs), Reference(multi_table, **kwargs)
    our_it, ref_it = iter(ours), iter(ref)
    for step in range(1, 8):
        list(itertools.islice(our_it, 2))
        list(itertools.islice(ref_it, 2))
        pulled = sum(ours.state_dict()["samples_consumed_per_split"])
        assert ours.consumed_rows == ref.consumed_rows == pulled, step
        assert ours.statistics().rows_delivered == pulled, step
    our_it.close()
    assert ours.statistics().rows_delivered == pulled


@pytest.mark.parametrize(
    ("num_splits", "batch_size", "largest"), [(1, None, 3), (2, None, 3), (1, 4, 4), (1, 2, 2)]
)
def test_chunks_stay_within_their_bytes_a_split(
    short_docs: Any, monkeypatch: pytest.MonkeyPatch, num_splits: int, batch_size: int | None, largest: int
) -> None:
    """A chunk cuts at most ``CHUNK_SPLIT_BYTES`` of blocks a split (three blocks here), or one
    batch where a batch is more, and ends on a batch boundary (two blocks of batches of two); the
    blocks are those of chunks as large as the read allows."""
    budget = num_splits * 16

    def blocks() -> tuple[list[list[int]], list[int]]:
        cuts: list[int] = []

        def spy(stream: SplitStream, k: int, length: int, pad: int) -> Any:
            cuts.append(k)
            return emit_cycles(stream, k, length, pad)

        monkeypatch.setattr(_packing, "emit_cycles", spy)
        ds = _dataset(short_docs, num_splits, budget)
        if batch_size is None:
            out = [block["input_ids"].tolist() for block in ds]
        else:
            loader = StreamingDataLoader(ds, batch_size=batch_size, batch_format="torch")
            out = [row for batch in loader for row in batch["input_ids"].tolist()]
        return out, cuts

    whole, uncapped = blocks()
    assert max(uncapped) > 4, "the whole read fits one chunk: the cap below would prove nothing"
    monkeypatch.setattr(_packing, "CHUNK_SPLIT_BYTES", 3 * LENGTH * _packing.BLOCK_BYTES_PER_TOKEN)
    capped, cuts = blocks()
    assert capped == whole
    assert max(cuts) == largest
