"""The table a dataset reads: the live table where it was built, a recipe to reopen it elsewhere.

Rules:
* In the process that built the dataset the handle holds the caller's table and the reader of the
  current epoch (:meth:`TableHandle.built`); a checkpoint's older version is a second handle
  (``_lance.table_at``), the caller's is never checked out.
* A computed or local permutation reads by storage position: every reader the handle opens,
  in this process or a copy, is a position reader (``TableSource.open(by_position=True)``).
* Pickled, the handle travels as a ``_lance.TableSource`` of the epoch's table version (no live
  connection, no secret storage options unless ``pickle_storage_credentials``). The copy reopens
  the table when it is unpickled; when that fails it keeps the exception and raises it at its
  first read, so a DataLoader worker fails on its first batch with the reason instead of dying
  at start-up.
"""

from __future__ import annotations

from typing import Any

from ._lance import Reader, TableSource, describe, table_at
from ._settings import Settings


class TableHandle:
    """How one dataset reaches its table (see the module rules)."""

    def __init__(self, table: Any, settings: Settings) -> None:
        self._table: Any = table
        self._source: TableSource | None = None  # a copy's recipe (the table itself stays behind)
        self._factory, self._keep = settings.connection_factory, settings.keep_credentials
        self._by_position = settings.by_position
        self._version: int | None = None
        self._reader: Reader | None = None
        self._open_error: Exception | None = None

    def at(self, version: int | None) -> Any:
        """The table to build an epoch from: the caller's, or a handle at ``version``."""
        return self._table if version is None else table_at(self._table, version)

    def schema(self) -> Any:
        """The caller's table's Arrow schema (``None`` in a pickled copy, which has no table)."""
        return None if self._table is None else self._table.schema

    def built(self, version: int | None, reader: Reader | None) -> None:
        """An epoch was built over table ``version``; ``reader`` (if any) reads it."""
        self._version, self._reader = version, reader

    def use(self, reader: Reader) -> None:
        """Read through ``reader`` until the next epoch (tests wrap the epoch's reader to count reads)."""
        self._reader = reader

    def reader(self) -> Reader:
        """The reader of the current epoch, opened on first use."""
        if self._reader is None:
            error, self._open_error = self._open_error, None
            if error is not None:
                raise RuntimeError(f"this copy of the dataset could not open its table: {error!r}") from error
            self._reader = self._recipe().open(self._by_position)
        return self._reader

    def _recipe(self) -> TableSource:
        if self._table is None:
            assert self._source is not None
            return self._source
        return describe(
            self._table, self._version, connection_factory=self._factory, keep_credentials=self._keep
        )

    def __getstate__(self) -> dict[str, Any]:
        source = None if self._table is None and self._source is None else self._recipe()
        return {
            "source": source,
            "version": self._version,
            "factory": self._factory,
            "keep": self._keep,
            "by_position": self._by_position,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._table, self._source = None, state["source"]
        self._factory, self._keep, self._version = state["factory"], state["keep"], state["version"]
        self._by_position = state["by_position"]
        self._reader, self._open_error = None, None
        if self._source is not None:  # a worker that cannot open the table fails at its first read instead
            try:
                self._reader = self._source.open(self._by_position)
            except Exception as exc:
                self._open_error = exc
