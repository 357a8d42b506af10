"""Fixtures of the mixture tests: three real LanceDB tables and the spec's model of a mixture of them.

The tables ``web`` (48 rows), ``code`` (24) and ``books`` (16) have an ``id`` column (unique over
all three: 0.., 1000.., 2000..) and a ``tokens`` column (0 to 5 tokens). :class:`Model` builds the
spec's ``MixtureConfig`` and ``SourceData`` from LanceDB's permutation builder read directly (the
``id`` values stand for row ids), so expected items and checkpoints come from
``elastic_loader.spec.mixture``, never from the pipeline under test.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import lancedb
import pyarrow as pa
import pytest

from elastic_loader import MixtureSource, StreamingMixture
from elastic_loader.spec.mixture import MixtureItem
from elastic_loader.spec.mixture_schedule import MixtureConfig, Regime, SourceData, integer_weights
from elastic_loader.spec.packing import Block
from elastic_loader.spec.rows import Faults, Yielded
from elastic_loader.spec.topology import PackingConfig, RunConfig

SIZES = {"web": (48, 0), "code": (24, 1000), "books": (16, 2000)}
SEEDS = {"web": 3, "code": 5, "books": 7}
EOS, PAD = -1, -2


def tokens_of(i: int) -> list[int]:
    return [10 * i + j for j in range((i * 7 + 3) % 6)]


def _table(db: Any, name: str) -> Any:
    n, base = SIZES[name]
    ids = list(range(base, base + n))
    data = pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "tokens": pa.array([tokens_of(i) for i in ids], pa.list_(pa.int64())),
        }
    )
    table = db.create_table(name, data.slice(0, n // 2), mode="overwrite")
    table.add(data.slice(n // 2))  # two fragments
    return table


@pytest.fixture(scope="session")
def mix_tables(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    db = lancedb.connect(str(tmp_path_factory.mktemp("mix_tables")))
    return {name: _table(db, name) for name in SIZES}


@dataclass
class Model:
    """One mixture of the three tables, as the pipeline and as the spec."""

    tables: dict[str, Any]
    split_ids: Any
    num_splits: int = 4
    weights: dict[str, float] = field(default_factory=lambda: {"web": 5, "code": 3, "books": 2})
    on_exhausted: str = "stop"
    cycles: int | None = None
    seed: int = 11
    epoch: int = 0
    packing: PackingConfig | None = None
    skipped: frozenset[int] = frozenset()
    options: dict[str, dict[str, Any]] = field(default_factory=dict)

    def source(self, name: str) -> MixtureSource:
        opts: dict[str, Any] = {"shuffle_seed": SEEDS[name], **self.options.get(name, {})}
        if self.packing is not None:
            p = self.packing
            opts.update(columns=["tokens"], pack_sequences=p.pack_sequences, eos_id=p.eos_id, pad_id=p.pad_id)
            opts["blocks_per_epoch"] = self.blocks(name)
        if self.skipped:
            skipped = self.skipped

            def transform(batch: Any) -> list[dict[str, Any]]:
                rows = batch.to_pylist()
                if any(r["id"] in skipped for r in rows):
                    raise ValueError("a skipped row")
                return rows

            opts.update(transform=transform, on_transform_error="skip")
        return MixtureSource(self.tables[name], **opts)

    def blocks(self, name: str) -> int:
        assert self.packing is not None
        return self.packing.blocks_per_epoch * SIZES[name][0] // 48

    def pipeline(self, rank: int = 0, world_size: int = 1, **kwargs: Any) -> StreamingMixture:
        return StreamingMixture(
            {name: self.source(name) for name in SIZES},
            kwargs.pop("weights", self.weights),
            num_splits=self.num_splits,
            rank=rank,
            world_size=world_size,
            seed=self.seed,
            epoch=self.epoch,
            on_exhausted=self.on_exhausted,
            cycles=self.cycles,
            **kwargs,
        )

    def config(self) -> MixtureConfig:
        sources = []
        for name in SIZES:
            packing = None
            if self.packing is not None:
                p = self.packing
                packing = PackingConfig(p.pack_sequences, p.eos_id, p.pad_id, self.blocks(name))
            sources.append(RunConfig(self.num_splits, SEEDS[name], self.epoch, None, packing))
        return MixtureConfig(
            tuple(SIZES), tuple(sources), self.seed, self.epoch, self.on_exhausted, self.cycles
        )

    def data(self, epochs: int = 6) -> tuple[SourceData, ...]:
        out = []
        for name in SIZES:
            perms = {
                e: tuple(
                    tuple(split)
                    for split in self.split_ids(
                        self.tables[name], num_splits=self.num_splits, shuffle_seed=SEEDS[name], epoch=e
                    )
                )
                for e in range(self.epoch, self.epoch + epochs)
            }
            corpus = None
            if self.packing is not None:
                n, base = SIZES[name]
                corpus = {i: tuple(tokens_of(i)) for i in range(base, base + n)}
            out.append(SourceData(perms, Faults(skipped=self.skipped), corpus))
        return tuple(out)

    def regimes(self, weights: dict[str, float] | None = None) -> tuple[Regime, ...]:
        w = weights or self.weights
        return (Regime(0, integer_weights([w[n] for n in SIZES])),)


@pytest.fixture
def model(mix_tables: dict[str, Any], perm_of: Any) -> Model:
    return Model(mix_tables, perm_of)


def key_of(item: Any) -> tuple[object, ...]:
    """A pipeline item as (source name, id) in row mode, (source name, input_ids, doc_ids) packed."""
    if "input_ids" in item:
        return (item["source"], tuple(item["input_ids"].tolist()), tuple(item["doc_ids"].tolist()))
    return (item["source"], item["id"])


def spec_key(item: MixtureItem) -> tuple[object, ...]:
    """The spec's item in the same shape as :func:`key_of`."""
    name = tuple(SIZES)[item.source]
    inner = item.item
    if isinstance(inner, Yielded):
        return (name, inner.row_id)
    assert isinstance(inner, Block)
    return (name, inner.input_ids, inner.doc_ids)


@pytest.fixture(scope="session")
def keys() -> Any:
    return key_of, spec_key
