"""Real LanceDB tables for the conformance machines, and what the spec needs to know about them.

Rules of this module:

* Tables are built on disk in a directory the caller owns (pytest's
  ``tmp_path_factory`` in our tests) and reused by key, so a Hypothesis run pays
  for each distinct table once.
* Every table has an int64 ``id`` column (unique, ``0..rows-1``) and a
  ``tokens`` column (``list<int64>``, :func:`document` of the id, or null for the
  ids in :attr:`TableKey.null_tokens`). Several fragments (one append each) make
  LanceDB row ids differ from storage offsets, so nothing can confuse the two.
* :func:`spec_permutation` computes the spec's :data:`~elastic_loader.spec.Permutation`
  with LanceDB's own permutation builder and the seed rule of the spec, never
  through an implementation under test. Its entries are ``id`` values: exactly
  what a transform sees, so delivered rows can be placed at (split, position).
* :func:`position_source` is the spec's computed or local permutation of a table
  (``StreamingDataset(permutation=...)``), :func:`positions_in_ids` its splits in
  ``id`` values through a scan in storage order (positions count the live rows).
* :class:`FaultyTransform` is a module-level class (picklable for DataLoader
  worker processes) that fails deterministically on a set of ids; with
  ``on_transform_error="skip"`` those ids are ``Faults(skipped=...)``, with
  ``"raise"`` they are ``Faults(raising=...)``.
"""

from __future__ import annotations

import hashlib
import itertools
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import lancedb
import pyarrow as pa
from lancedb.permutation import permutation_builder

from ..spec import Permutation, group_permutation, perm_seed
from ..spec.computed import ComputedPermutation, computed_splits
from ..spec.local import LocalPermutation, local_splits

ID_COLUMN = "id"
TOKEN_COLUMN = "tokens"
TOKEN_BASE = 1000
"""Every corpus token is ``>= TOKEN_BASE``, so small or negative ids are free for EOS and padding."""

MAX_NAME = 96
"""The longest name :class:`TableKey` gives a table (LanceDB 0.41 allows 128 characters)."""

Documents = dict[int, tuple[int, ...] | None]
"""``id`` -> token tuple, ``None`` for a null token list."""


def document(row_id: int) -> tuple[int, ...]:
    """The token list stored for ``row_id`` (0 to 5 tokens; empty documents occur)."""
    length = (row_id * 5 + 2) % 6
    return tuple(TOKEN_BASE + 8 * row_id + j for j in range(length))


@dataclass(frozen=True)
class TableKey:
    """Identifies one test table: row count, fragment count and the ids whose token list is null."""

    rows: int
    fragments: int = 1
    null_tokens: frozenset[int] = field(default_factory=frozenset)

    def __post_init__(self) -> None:
        if self.rows < 1 or not 1 <= self.fragments <= self.rows:
            raise ValueError(f"need rows >= 1 and 1 <= fragments <= rows, got {self.rows}, {self.fragments}")

    @property
    def name(self) -> str:
        """A table name unique to this key, at most ``MAX_NAME`` characters.

        The null ids are spelled out while they fit; a longer list is named by a digest of it
        (LanceDB 0.41 refuses table names over 128 characters).
        """
        nulls = "_".join(str(i) for i in sorted(self.null_tokens)) or "none"
        name = f"t{self.rows}_f{self.fragments}_n{nulls}"
        if len(name) <= MAX_NAME:
            return name
        digest = hashlib.sha256(nulls.encode()).hexdigest()[:32]
        return f"t{self.rows}_f{self.fragments}_h{digest}"


def _chunk(key: TableKey, start: int, stop: int) -> pa.Table:
    ids = list(range(start, stop))
    tokens = [None if i in key.null_tokens else list(document(i)) for i in ids]
    return pa.table(
        {
            ID_COLUMN: pa.array(ids, pa.int64()),
            TOKEN_COLUMN: pa.array(tokens, pa.list_(pa.int64())),
        }
    )


def build_table(directory: str | Path, key: TableKey) -> object:
    """Create (or overwrite) the table of ``key`` in a LanceDB database at ``directory``.

    Rows are written in ``key.fragments`` appends of nearly equal size, in id order.
    Returns the opened LanceDB table.
    """
    db = lancedb.connect(str(directory))
    bounds = [key.rows * k // key.fragments for k in range(key.fragments + 1)]
    table = db.create_table(key.name, _chunk(key, bounds[0], bounds[1]), mode="overwrite")
    for lo, hi in itertools.pairwise(bounds[1:]):
        table.add(_chunk(key, lo, hi))
    return table


def read_documents(table: object) -> Documents:
    """Read every row's token list from ``table`` (``None`` for a null list)."""
    data = table.to_arrow()  # type: ignore[attr-defined]
    ids = data.column(ID_COLUMN).to_pylist()
    tokens = data.column(TOKEN_COLUMN).to_pylist()
    return {i: None if t is None else tuple(t) for i, t in zip(ids, tokens)}


def spec_permutation(
    table: object,
    *,
    num_splits: int,
    shuffle_seed: int,
    epoch: int,
    shuffle: bool = True,
    filter: str | None = None,
) -> Permutation:
    """The permutation a conforming implementation reads, in ``id`` values.

    Builds the backend permutation exactly as the spec prescribes
    (``split_random(fixed=S, seed=shuffle_seed + epoch * 100003)`` or
    ``split_sequential(fixed=S)``, after ``filter``), groups it by split in read
    order and maps each LanceDB row id to the row's ``id``.

    Raises:
        ValueError: the backend rejects the configuration (for example fewer
            rows than splits), or the splits are unequal.
    """
    builder = permutation_builder(table)  # type: ignore[arg-type]
    if filter is not None:
        builder = builder.filter(filter)
    if shuffle:
        builder = builder.split_random(fixed=num_splits, seed=perm_seed(shuffle_seed, epoch))
    else:
        builder = builder.split_sequential(fixed=num_splits)
    perm_table = builder.execute().to_arrow()
    row_ids = perm_table.column("row_id").to_pylist()
    split_ids = perm_table.column("split_id").to_pylist()
    taken = table.to_lance()._take_rows(row_ids, columns=[ID_COLUMN])  # type: ignore[attr-defined]
    ids = taken.column(ID_COLUMN).to_pylist()
    if len(ids) != len(row_ids):
        raise ValueError(f"took {len(ids)} rows for {len(row_ids)} row ids")
    return group_permutation(ids, split_ids, num_splits)


PositionSource = ComputedPermutation | LocalPermutation
"""The spec's permutation of ``permutation="computed"`` or ``LocalShuffle(clump, window)``."""


def position_source(
    rows: int, num_splits: int, shuffle_seed: int, epoch: int, local: tuple[int, int] | None
) -> PositionSource:
    """The spec's computed permutation (``local=None``) or local one (``local=(clump, window)``)."""
    if local is None:
        return ComputedPermutation(rows, num_splits, shuffle_seed, epoch)
    return LocalPermutation(rows, num_splits, shuffle_seed, epoch, local[0], local[1])


def positions_in_ids(table: object, source: PositionSource) -> Permutation:
    """The splits of ``source`` in ``id`` values (``table``'s rows in storage order)."""
    scan = table.to_lance().to_table(columns=[ID_COLUMN])  # type: ignore[attr-defined]
    ids = scan.column(ID_COLUMN).to_pylist()
    splits = computed_splits(source) if isinstance(source, ComputedPermutation) else local_splits(source)
    return tuple(tuple(ids[p] for p in split) for split in splits)


def doc_lengths(perm: Permutation, documents: Mapping[int, tuple[int, ...] | None]) -> list[list[int | None]]:
    """Token counts per split and position (``None`` for a null list), for the ``"auto"`` budget."""
    lengths: list[list[int | None]] = []
    for split in perm:
        row: list[int | None] = []
        for i in split:
            doc = documents[i]
            row.append(None if doc is None else len(doc))
        lengths.append(row)
    return lengths


@dataclass
class TableCache:
    """Tables and permutations built once per ``directory`` and reused across examples."""

    directory: Path
    _tables: dict[TableKey, object] = field(default_factory=dict)
    _documents: dict[TableKey, Documents] = field(default_factory=dict)
    _perms: dict[tuple[TableKey, int, int, bool, str | None], Permutation] = field(default_factory=dict)

    def table(self, key: TableKey) -> object:
        """The table of ``key`` (built on first use)."""
        if key not in self._tables:
            self._tables[key] = build_table(self.directory, key)
        return self._tables[key]

    def documents(self, key: TableKey) -> Documents:
        """:func:`read_documents` of the table of ``key``."""
        if key not in self._documents:
            self._documents[key] = read_documents(self.table(key))
        return self._documents[key]

    def permutation(
        self,
        key: TableKey,
        *,
        num_splits: int,
        shuffle_seed: int,
        epoch: int,
        shuffle: bool,
        filter: str | None,
    ) -> Permutation:
        """:func:`spec_permutation` of the table of ``key``, cached by backend seed (collisions share)."""
        seed = perm_seed(shuffle_seed, epoch) if shuffle else 0
        cache_key = (key, num_splits, seed, shuffle, filter)
        if cache_key not in self._perms:
            self._perms[cache_key] = spec_permutation(
                self.table(key),
                num_splits=num_splits,
                shuffle_seed=shuffle_seed,
                epoch=epoch,
                shuffle=shuffle,
                filter=filter,
            )
        return self._perms[cache_key]


class InjectedFault(ValueError):
    """The error :class:`FaultyTransform` raises; the message names the first failing id."""


_FAULT_ID = re.compile(r"injected transform fault at id (-?\d+)")


def fault_row(error: BaseException) -> int | None:
    """The id named by an :class:`InjectedFault` message (also after a DataLoader worker re-raised it)."""
    match = _FAULT_ID.search(str(error))
    return int(match.group(1)) if match else None


class FaultyTransform:
    """A batch transform that fails on every batch holding one of ``failing`` ids.

    Otherwise it returns one ``{"id": value}`` dict per row, in order. It is
    deterministic and accepts batches of any size, as ``on_transform_error``
    requires (single-row re-runs then fail exactly on the failing ids).
    """

    def __init__(self, failing: Iterable[int] = ()) -> None:
        self.failing = frozenset(failing)

    def __call__(self, batch: pa.RecordBatch) -> list[dict[str, int]]:
        ids: Sequence[int] = batch.column(ID_COLUMN).to_pylist()
        bad = [i for i in ids if i in self.failing]
        if bad:
            raise InjectedFault(f"injected transform fault at id {bad[0]}")
        return [{ID_COLUMN: i} for i in ids]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FaultyTransform) and other.failing == self.failing

    def __hash__(self) -> int:
        return hash(self.failing)

    def __repr__(self) -> str:
        return f"FaultyTransform({sorted(self.failing)!r})"
