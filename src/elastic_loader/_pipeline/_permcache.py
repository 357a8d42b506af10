"""The on-disk cache of the builder's permutation: a restart or a resume reads it instead of rebuilding.

Rules:
* Opt-in: only when the environment variable ``ELASTIC_LOADER_PERM_CACHE`` names a directory
  (created if missing). Nothing is cached otherwise, so the drop-in default writes no files.
* Only the builder's own shuffles are cached (``split_strategy`` is a callable whose result
  cannot be keyed), and only for a table stored as a local Lance dataset.
* The key is a SHA-256 over everything that fixes the permutation: the dataset URI, its
  version, every fragment's id, data files and deletion file (Lance names them uniquely, so a
  table dropped and re-created at the same path and version is another key), the rows of that
  version, ``num_splits``, ``shuffle``, the epoch seed, ``shuffle_clump_size``, ``filter``, and
  the cache format. A different key never hits; a hit is the very array the builder produced.
* A hit is used only when it is a 2-D uint64 array of ``num_splits`` rows (the key fixes the
  rest); anything unreadable or inconsistent is a miss (rebuilt, logged at debug), never an
  error and never silently used. Only a permutation built from the key's version is stored.
* Writes are atomic: a temporary file in the cache directory, flushed and ``fsync``-ed, then
  ``os.replace``-d onto its name, so concurrent ranks writing the same key leave one complete
  file (identical contents) and a reader never sees a partial one. A write that fails is logged
  and ignored: the permutation was built, only the cache is missing.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ._lance import BuilderArgs, SplitRows

ENV = "ELASTIC_LOADER_PERM_CACHE"
"""The environment variable naming the cache directory (unset or empty: no cache)."""
FORMAT = "elastic-loader-perm-cache-v1"
logger = logging.getLogger("elastic_loader")


def cache_dir() -> Path | None:
    """The configured cache directory, or ``None``."""
    value = os.environ.get(ENV, "")
    return Path(value) if value else None


def _table_identity(table: Any) -> dict[str, Any] | None:
    """The dataset URI, version, rows and fragments (files, deletions) of ``table``, or ``None``."""
    try:
        dataset = table.to_lance()
    except Exception:  # memory:// and remote tables have no local Lance dataset
        return None
    fragments = []
    for fragment in dataset.get_fragments():
        meta = fragment.metadata
        deletion = meta.deletion_file
        fragments.append(
            [int(meta.id), [f.path for f in meta.files], None if deletion is None else deletion.asdict()]
        )
    return {"uri": str(dataset.uri), "version": int(dataset.version), "fragments": fragments}


def cache_key(table: Any, args: BuilderArgs) -> tuple[str, int] | None:
    """``(key, table version)`` of a builder permutation, or ``None`` when it cannot be cached."""
    identity = _table_identity(table)
    if identity is None:
        return None
    parts = {
        "format": FORMAT,
        "table": identity,
        "num_splits": args.num_splits,
        "shuffle": args.shuffle,
        "seed": args.seed if args.shuffle else None,
        "clump_size": args.clump_size if args.shuffle else None,
        "filter": args.filter,
    }
    text = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest(), int(identity["version"])


def _load(path: Path, num_splits: int, version: int) -> SplitRows | None:
    try:
        rows = np.load(path, mmap_mode="r", allow_pickle=False)
    except FileNotFoundError:
        return None
    except Exception as exc:  # a damaged file is a miss: rebuilt and rewritten
        logger.debug("permutation cache %s unreadable (%r); rebuilding", path, exc)
        return None
    if rows.dtype != np.uint64 or rows.ndim != 2 or rows.shape[0] != num_splits or rows.shape[1] < 1:
        logger.debug("permutation cache %s has shape %s; rebuilding", path, rows.shape)
        return None
    return SplitRows(rows, None, version)


def _store(path: Path, perm: SplitRows) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}-", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as out:
                np.save(out, np.ascontiguousarray(perm.rows, dtype=np.uint64), allow_pickle=False)
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    except OSError as exc:
        logger.warning("could not write the permutation cache %s: %r (the permutation was built)", path, exc)


def cached(
    key: tuple[str, int] | None, num_splits: int, build: Callable[[], SplitRows]
) -> tuple[SplitRows, bool]:
    """The permutation of ``key`` from the cache, else ``build()`` (stored when it is of the key's
    version); and whether it was a hit."""
    where = cache_dir()
    if where is None or key is None:
        return build(), False
    digest, version = key
    path = where / f"{digest}.npy"
    hit = _load(path, num_splits, version)
    if hit is not None:
        return hit, True
    perm = build()
    if perm.base_version == version and perm.fingerprint is None:
        _store(path, perm)
    return perm, False
