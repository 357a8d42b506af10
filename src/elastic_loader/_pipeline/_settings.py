"""The dataset's settings: every constructor argument, validated once, frozen.

Rules:
* :func:`settings_for` validates the arguments (``_validate.check_parameters``,
  in the order spec/ERRORS.md gives) before any other I/O, resolves the
  defaults (``num_splits``, a drawn ``shuffle_seed``, ``prefetch_batches``)
  and returns one frozen :class:`Settings`. Nothing changes them afterwards:
  what changes (the epoch, its permutation and budget, progress) is the
  dataset's state, not a setting.
* An iteration (``_session``) reads only settings and the state it is handed.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any, Literal

from ._checkpoint import Identity
from ._faults import OnError
from ._lance import column_kind, count_rows, fixed_row_bytes
from ._positions import Kind
from ._validate import check_parameters


@dataclass(frozen=True)
class Settings:
    """The validated constructor arguments (see ``StreamingDataset`` for each one's meaning)."""

    num_splits: int
    shuffle: bool
    split_strategy: Callable[[Any], Any] | None
    shuffle_seed: int
    rank: int
    world_size: int
    read_batch_size: int
    io_queue_depth: int
    columns: list[str] | None
    shuffle_clump_size: int | None
    filter: str | None
    transform: Callable[[Any], Any] | None
    transform_parallelism: int | None
    pack_sequences: int | None
    eos_id: int | None
    pad_id: int | None
    blocks_per_epoch: int | Literal["auto"] | None
    """As requested; the dataset resolves ``"auto"`` per epoch."""
    on_transform_error: OnError
    transform_queue_depth: int | None
    connection_factory: Callable[[str], Any] | None
    worker_info_override: Any
    keep_credentials: bool
    """``pickle_storage_credentials``."""
    read_ahead_bytes: int
    """The byte budget of what one iterator reads and transforms ahead (``None`` resolved)."""
    read_timeout: float | None
    """Seconds a storage read may make no progress; ``None``: never (``math.inf`` was passed)."""
    row_bytes_hint: int | None
    """Arrow bytes of one row when every read column has a fixed width (``None``: the pipeline probes)."""
    rows_hint: int
    """Rows after the filter, as counted at construction (sizes the permutation builder's memory)."""
    permutation: Kind
    """``"builder"`` (LanceDB's permutation builder), ``"computed"`` or a ``LocalShuffle``."""

    @property
    def splits_per_rank(self) -> int:
        return self.num_splits // self.world_size

    @property
    def packed(self) -> bool:
        return self.pack_sequences is not None

    @property
    def by_position(self) -> bool:
        """The permutation is computed (``"computed"`` or local): rows are read by storage position."""
        return self.permutation != "builder"

    def identity(self, epoch: int, fingerprint: str | None, blocks_per_epoch: int | None) -> Identity:
        """What a checkpoint of ``epoch`` must agree on with this dataset."""
        packing = None
        if self.pack_sequences is not None:
            assert self.eos_id is not None and self.pad_id is not None and blocks_per_epoch is not None
            packing = (self.pack_sequences, self.eos_id, self.pad_id, blocks_per_epoch)
        return Identity(self.shuffle_seed, self.num_splits, epoch, fingerprint, packing)

    def transform_threads(self) -> int:
        """Threads of the transform stage in this process (``transform_parallelism``, else the CPUs)."""
        return self.transform_parallelism or os.cpu_count() or 1


def settings_for(table: Any, arguments: dict[str, Any], keep_credentials: object) -> Settings:
    """Validate ``StreamingDataset(table, **arguments)`` (``keep_credentials``:
    ``pickle_storage_credentials``) and resolve its defaults.

    Raises:
        TypeError: a parameter has the wrong type (``table`` is not a LanceDB table).
        ValueError: a parameter is out of range or inconsistent.
    """
    if not (hasattr(table, "schema") and callable(getattr(table, "count_rows", None))):
        raise TypeError(
            f"table must be a LanceDB table (with .schema and .count_rows()), got {type(table).__name__}"
        )
    rows_seen: list[int] = []

    def rows_after_filter() -> int:
        rows_seen.append(count_rows(table, arguments["filter"]))
        return rows_seen[-1]

    given_all = {**arguments, "pickle_storage_credentials": keep_credentials}
    checked = check_parameters(given_all, lambda name: column_kind(table, name), rows_after_filter)
    seed, columns = arguments["shuffle_seed"], arguments["columns"]
    resolved_columns = list(columns) if columns is not None else None
    resolved: dict[str, Any] = {
        "num_splits": checked.num_splits,
        "shuffle_seed": random.randrange(2**32) if checked.draw_seed else int(seed or 0),
        "io_queue_depth": checked.io_queue_depth,
        "columns": list(columns) if columns is not None else None,
        "keep_credentials": keep_credentials is True,
        "rows_hint": rows_seen[-1] if rows_seen else 0,
        "read_ahead_bytes": checked.read_ahead_bytes,
        "read_timeout": checked.read_timeout,
        "row_bytes_hint": fixed_row_bytes(table, resolved_columns),
        "permutation": checked.permutation,
    }
    given = {f.name: arguments[f.name] for f in fields(Settings) if f.name not in resolved}
    return Settings(**given, **resolved)
