"""One source of a mixture: a table with its own ``StreamingDataset`` options, and what reads it.

Rules:

* :class:`MixtureSource` is the user's recipe: a LanceDB table and the per-source options of
  ``StreamingDataset`` (seed, filter, columns, transform, shuffle, packing tokens, error policy,
  read tuning...). The topology (``num_splits``, ``rank``, ``world_size``) and the epoch belong to
  the mixture and are refused here.
* :class:`SourceReader` validates the options with the single-table rules (``_settings``: same
  checks, same errors), builds each source epoch the mixture's schedule reads with the single-table
  permutation (``_epoch``), all at one table version, and opens single-table ``_session.Session``s
  over any owned splits from any single-table progress. It is the single-table machinery, composed:
  a source epoch of a mixture reads exactly what that table's ``StreamingDataset`` reads.
* ``blocks_per_epoch="auto"`` is refused: a source's capacity must be known without reading rows,
  the same on every rank and in every source epoch.
"""

from __future__ import annotations

from typing import Any

from .._exports import public
from ._checkpoint import Identity, PackedState, RowState, State
from ._epoch import Perm, build_epoch, split_rows
from ._handle import TableHandle
from ._session import Session
from ._settings import Settings, settings_for
from ._stats import Counters

OPTIONS: dict[str, Any] = {
    "shuffle": True,
    "split_strategy": None,
    "shuffle_seed": 0,
    "read_batch_size": 64,
    "io_queue_depth": 4,
    "columns": None,
    "shuffle_clump_size": None,
    "filter": None,
    "transform": None,
    "transform_parallelism": None,
    "pack_sequences": None,
    "eos_id": None,
    "pad_id": None,
    "blocks_per_epoch": None,
    "on_transform_error": "raise",
    "transform_queue_depth": None,
    "connection_factory": None,
    "read_ahead_bytes": None,
    "read_timeout": None,
}
"""The per-source options and their defaults (those of ``StreamingDataset``)."""

MIXTURE_OWNED = ("num_splits", "rank", "world_size", "epoch", "worker_info_override")


@public
class MixtureSource:
    """One source of a :class:`StreamingMixture`: a LanceDB table and its own options.

    Args:
        table: the source's LanceDB table.
        pickle_storage_credentials: as for ``StreamingDataset``.
        **options: any ``StreamingDataset`` option except the topology and epoch
            (``num_splits``, ``rank``, ``world_size``, ``epoch``,
            ``worker_info_override``, which the mixture sets): ``shuffle_seed``,
            ``filter``, ``columns``, ``transform``, ``pack_sequences``, ...

    Raises:
        TypeError: an unknown option.
        ValueError: an option the mixture owns.
    """

    def __init__(self, table: Any, *, pickle_storage_credentials: bool = False, **options: Any) -> None:
        owned = sorted(set(options) & set(MIXTURE_OWNED))
        if owned:
            raise ValueError(f"{owned} are set on the StreamingMixture, not on a MixtureSource")
        unknown = sorted(set(options) - set(OPTIONS))
        if unknown:
            raise TypeError(f"MixtureSource got unknown options {unknown}")
        self.table = table
        self.options = dict(options)
        self.pickle_storage_credentials = pickle_storage_credentials

    def __repr__(self) -> str:
        return f"MixtureSource({self.table!r}, {self.options!r})"


class SourceReader:
    """A source's validated settings, the permutations of its source epochs, and its sessions."""

    def __init__(self, name: str, source: MixtureSource, topology: dict[str, Any]) -> None:
        if not isinstance(source, MixtureSource):
            raise TypeError(f"source {name!r} must be a MixtureSource, got {type(source).__name__}")
        arguments = {**OPTIONS, **source.options, **topology, "epoch": 0, "prefetch_batches": None}
        self.name = name
        self.settings: Settings = settings_for(source.table, arguments, source.pickle_storage_credentials)
        if self.settings.blocks_per_epoch == "auto":
            raise ValueError(
                f"source {name!r}: blocks_per_epoch='auto' is not supported in a mixture (every rank must "
                "know a source's blocks without reading it); pass an int"
            )
        self.handle = TableHandle(source.table, self.settings)
        self.perms: dict[int, Perm] = {}
        self.version: int | None = None

    def build(self, epochs: range, version: int | None = None) -> None:
        """Build the permutations of ``epochs`` (at table ``version``; default the latest, or the one
        already pinned)."""
        if version is not None and version != self.version:
            self.perms.clear()
        table = self.handle.at(version if version is not None else self.version)
        for e in epochs:
            if e in self.perms:
                continue
            epoch = build_epoch(table, self.settings, e)
            self.perms[e] = epoch.perm
            self.version = epoch.perm.base_version
            self.handle.built(self.version, epoch.reader)

    @property
    def split_len(self) -> int:
        return next(iter(self.perms.values())).split_len

    @property
    def blocks_per_epoch(self) -> int | None:
        blocks = self.settings.blocks_per_epoch
        assert blocks != "auto"
        return blocks

    @property
    def capacity(self) -> int:
        """Cycles of one source epoch: the split length, or the blocks per split when packing."""
        blocks = self.blocks_per_epoch
        return self.split_len if blocks is None else blocks // self.settings.num_splits

    @property
    def pin(self) -> list[int | None]:
        """The table version the permutations were built from, and the rows they hold."""
        return [self.version, self.settings.num_splits * self.split_len]

    def identity(self, epoch: int) -> Identity:
        """What the single-table checkpoint of source epoch ``epoch`` pins."""
        return self.settings.identity(epoch, self.perms[epoch].fingerprint, self.blocks_per_epoch)

    def empty(self) -> State:
        n = self.settings.num_splits
        return PackedState([0] * n, [0] * n, {}) if self.settings.packed else RowState([0] * n, [0] * n)

    def session(self, epoch: int, owned: list[int], start: State, counters: Counters) -> Session:
        """A single-table session over ``owned`` splits of source epoch ``epoch`` from ``start``."""
        return Session(
            self.settings,
            owned,
            split_rows(self.perms[epoch], owned),
            start,
            blocks_per_epoch=self.blocks_per_epoch,
            reader=self.handle.reader(),
            counters=counters,
            hook=None,
        )
