"""Constructor validation for StreamingDataset.

Rules: every parameter is checked here, before any I/O, in a fixed order:
types first (TypeError), then values (ValueError). The order and the
exception classes follow spec/ERRORS.md; this module is an independent
implementation and must not import elastic_loader.spec. Every parameter has a
range: integers end at int64's maximum unless a tighter bound is named, thread
counts at ``MAX_THREADS``, and a packed block must fit in the byte budget, so
no accepted value reaches an OverflowError or MemoryError later.
"""

from __future__ import annotations

import logging
import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

from ._lance import EPOCH_PRIME
from ._positions import BUILDER, Kind, LocalShuffle, describe_kind, resolve_kind

SEED_LIMIT = 2**64
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
DEFAULT_READ_AHEAD_BYTES = 256 * 2**20
DEFAULT_READ_TIMEOUT = 300.0
MAX_READ_TIMEOUT = 10**9
MAX_THREADS = 1024
BLOCK_BYTES_PER_TOKEN = 16  # a packed token's input_ids and doc_ids entries


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _need(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)


@dataclass(frozen=True)
class Checked:
    """Parameters after validation and default resolution."""

    num_splits: int
    io_queue_depth: int
    draw_seed: bool
    read_ahead_bytes: int
    read_timeout: float | None
    """Seconds; ``None``: never."""
    permutation: Kind = BUILDER
    """``"builder"``, ``"computed"`` or a ``LocalShuffle`` (``"local"`` resolved)."""


# Integer parameters in checking order: (name, may be None, minimum or None).
_INTS: tuple[tuple[str, bool, int | None], ...] = (
    ("prefetch_batches", True, None),
    ("world_size", False, 1),
    ("rank", False, 0),
    ("num_splits", True, 1),
    ("epoch", False, 0),
    ("shuffle_seed", True, 0),
    ("read_batch_size", False, 1),
    ("io_queue_depth", False, None),
    ("transform_parallelism", True, 1),
    ("transform_queue_depth", True, 1),
    ("shuffle_clump_size", True, 1),
    ("pack_sequences", True, None),
    ("eos_id", True, None),
    ("pad_id", True, None),
    ("read_ahead_bytes", True, 1),
)
_UPPER = {"shuffle_seed": SEED_LIMIT - 1, "epoch": SEED_LIMIT - 1, "transform_parallelism": MAX_THREADS}


def _columns_ok(value: object) -> bool:
    return value is None or (isinstance(value, (list, tuple)) and all(isinstance(c, str) for c in value))


def _worker_info_ok(value: object) -> bool:
    if value is None:
        return True
    return _is_int(getattr(value, "id", None)) and _is_int(getattr(value, "num_workers", None))


def _seconds_ok(value: object) -> bool:
    return value is None or (isinstance(value, (int, float)) and not isinstance(value, bool))


_OTHERS: tuple[tuple[str, Callable[[object], bool], str], ...] = (
    ("shuffle", lambda v: isinstance(v, bool), "a bool"),
    ("split_strategy", lambda v: v is None or callable(v), "None or a callable"),
    ("filter", lambda v: v is None or isinstance(v, str), "None or a SQL string"),
    ("transform", lambda v: v is None or callable(v), "None or a callable"),
    ("connection_factory", lambda v: v is None or callable(v), "None or a callable"),
    ("columns", _columns_ok, "None or a list of column names"),
    ("worker_info_override", _worker_info_ok, "None or an object with int .id and .num_workers"),
    ("read_timeout", _seconds_ok, "None or a number of seconds"),
    ("pickle_storage_credentials", lambda v: v is None or isinstance(v, bool), "a bool"),
)


def check_parameters(
    p: dict[str, object],
    column_kind: Callable[[str], str | None],
    count_rows: Callable[[], int],
) -> Checked:
    """Validate constructor keywords ``p``.

    Args:
        p: every keyword of ``StreamingDataset`` by name.
        column_kind: schema lookup: ``None`` for an unknown column, else
            ``"int_list"``, ``"other_list"`` or ``"scalar"``.
        count_rows: rows passing ``filter`` (called last, it may do I/O).

    Raises:
        TypeError: a parameter has the wrong type.
        ValueError: a parameter is out of range or inconsistent.
    """
    _check_types(p)
    io_queue_depth = p["io_queue_depth"]
    if p["prefetch_batches"] is not None:
        message = "prefetch_batches is deprecated; use io_queue_depth (prefetch_batches will go away)"
        logging.getLogger("elastic_loader").warning(message)  # the reference logs it; we also warn
        warnings.warn(message, DeprecationWarning, stacklevel=5)
        io_queue_depth = p["prefetch_batches"]
    _check_ranges(p)
    num_splits = _check_topology(p)
    kind = _check_permutation(p)
    assert isinstance(io_queue_depth, int)
    _need(
        0 < io_queue_depth <= MAX_THREADS,
        f"io_queue_depth must be greater than 0 and <= {MAX_THREADS} (threads), got {io_queue_depth}",
    )
    budget = DEFAULT_READ_AHEAD_BYTES if p["read_ahead_bytes"] is None else cast(int, p["read_ahead_bytes"])
    _check_packing(p, num_splits, column_kind, budget)
    mode = p["on_transform_error"]
    _need(
        mode in ("raise", "skip", "warn") or callable(mode),
        f"on_transform_error must be 'raise', 'skip', 'warn' or a callable, got {mode!r}",
    )
    columns = p["columns"]
    if columns is not None:
        assert isinstance(columns, (list, tuple))
        _check_columns(columns, column_kind)
    rows = count_rows()
    _need(
        rows >= num_splits,
        f"the table has {rows} rows (after filter), fewer than num_splits={num_splits}; "
        "every split needs at least one row",
    )
    timeout = DEFAULT_READ_TIMEOUT if p["read_timeout"] is None else float(cast(float, p["read_timeout"]))
    seconds = None if timeout == math.inf else timeout
    return Checked(num_splits, io_queue_depth, p["shuffle_seed"] is None, budget, seconds, kind)


def _check_ranges(p: dict[str, object]) -> None:
    """Integer ranges in parameter order, then ``read_timeout`` and ``worker_info_override``."""
    for name, _, minimum in _INTS:
        value = p[name]
        if minimum is None or not isinstance(value, int):
            continue
        maximum = _UPPER.get(name, INT64_MAX)
        low = "greater than 0" if minimum == 1 else f">= {minimum}"  # the reference's wording for 1
        _need(
            minimum <= value <= maximum,
            f"{name} must be {low} and <= {maximum} ([{minimum}, {maximum}]), got {value}",
        )
    timeout = p["read_timeout"]
    if timeout is not None:
        assert isinstance(timeout, (int, float))
        _need(
            0 < timeout <= MAX_READ_TIMEOUT or timeout == math.inf,
            f"read_timeout must be greater than 0 and <= {MAX_READ_TIMEOUT} seconds (or math.inf), "
            f"got {timeout}",
        )
    info: Any = p["worker_info_override"]
    if info is not None:
        workers, worker = info.num_workers, info.id
        _need(
            1 <= workers <= INT64_MAX and 0 <= worker < workers,
            f"worker_info_override needs 0 <= id < num_workers, got id={worker}, num_workers={workers}",
        )


def _check_types(p: dict[str, object]) -> None:
    for name, nullable, _ in _INTS:
        value = p[name]
        if (value is None and nullable) or _is_int(value):
            continue
        raise TypeError(f"{name} must be an int, got {value!r}")
    for name, ok, what in _OTHERS:
        if not ok(p[name]):
            raise TypeError(f"{name} must be {what}, got {p[name]!r}")
    kind = p.get("permutation", BUILDER)
    if not isinstance(kind, (str, LocalShuffle)):
        resolve_kind(kind)  # its TypeError; an unknown string is a ValueError, after the ranges


_ONLY_BUILDER: tuple[tuple[str, Callable[[object], bool], str], ...] = (
    ("shuffle", lambda v: v is not True, "shuffle=False (storage order)"),
    ("split_strategy", lambda v: v is not None, "split_strategy"),
    ("shuffle_clump_size", lambda v: v is not None, "shuffle_clump_size (LocalShuffle has its own clump)"),
    ("filter", lambda v: v is not None, "filter (positions would skip the filtered-out rows unevenly)"),
)
"""What only the permutation builder does: (keyword, is it used, what the message calls it)."""


def _check_permutation(p: dict[str, object]) -> Kind:
    """The ``permutation`` kind; a computed or local one refuses what only the builder does."""
    kind = resolve_kind(p.get("permutation", BUILDER))
    if kind == BUILDER:
        return kind
    for name, used, what in _ONLY_BUILDER:
        _need(
            not used(p[name]),
            f"{describe_kind(kind)} shuffles every row of the table by storage position and cannot be "
            f"combined with {what}; use permutation='builder' for it",
        )
    return kind


def _check_topology(p: dict[str, object]) -> int:
    """Rank, world size, splits and seed; returns ``num_splits`` (``None`` means ``world_size``)."""
    world_size, rank = cast(int, p["world_size"]), cast(int, p["rank"])
    _need(rank < world_size, f"rank ({rank}) must be smaller than world_size ({world_size})")
    num_splits = world_size if p["num_splits"] is None else cast(int, p["num_splits"])
    _need(
        num_splits % world_size == 0,
        f"num_splits ({num_splits}) must be divisible by world_size ({world_size})",
    )
    seed, epoch = p["shuffle_seed"], cast(int, p["epoch"])
    if seed is None:
        _need(
            world_size == 1,
            "shuffle_seed=None draws a different random seed on every rank, so ranks would "
            "read different permutations; pass the same explicit shuffle_seed on every rank",
        )
    else:
        _need(
            cast(int, seed) + epoch * EPOCH_PRIME < SEED_LIMIT,
            f"shuffle_seed + epoch * {EPOCH_PRIME} must be < 2**64",
        )
    return num_splits


def check_epoch(shuffle_seed: int, epoch: object) -> None:
    """Validate ``set_epoch(epoch)`` on a dataset whose seed is ``shuffle_seed``.

    Raises:
        TypeError: ``epoch`` is not an int.
        ValueError: ``epoch`` is negative or the permutation seed would overflow.
    """
    if not _is_int(epoch):
        raise TypeError(f"epoch must be an int, got {epoch!r}")
    assert isinstance(epoch, int)
    _need(epoch >= 0, f"epoch must be >= 0, got {epoch}")
    _need(
        shuffle_seed + epoch * EPOCH_PRIME < SEED_LIMIT,
        f"shuffle_seed + epoch * {EPOCH_PRIME} must be < 2**64",
    )


def _check_columns(columns: Sequence[str], column_kind: Callable[[str], str | None]) -> None:
    _need(len(columns) > 0, "columns must name at least one column (or be None for all)")
    _need(len(set(columns)) == len(columns), f"columns must not repeat a name: {list(columns)}")
    for name in columns:
        _need(column_kind(name) is not None, f"unknown column {name!r}")


def _check_packing(
    p: dict[str, object], num_splits: int, column_kind: Callable[[str], str | None], budget: int
) -> None:
    pack = p["pack_sequences"]
    bpe = p["blocks_per_epoch"]
    if pack is None:
        _need(bpe is None, "blocks_per_epoch requires pack_sequences")
        return
    assert isinstance(pack, int)
    _need(pack > 0, f"pack_sequences must be greater than 0, got {pack}")
    _need(
        pack * BLOCK_BYTES_PER_TOKEN <= budget,
        f"a block of pack_sequences={pack} tokens takes {pack * BLOCK_BYTES_PER_TOKEN} bytes (input_ids "
        f"and doc_ids), more than read_ahead_bytes={budget}; raise read_ahead_bytes or pack shorter blocks",
    )
    _need(p["eos_id"] is not None, "eos_id is required when pack_sequences is set")
    _need(p["pad_id"] is not None, "pad_id is required when pack_sequences is set")
    for name in ("eos_id", "pad_id"):
        value = p[name]
        assert isinstance(value, int)
        _need(INT64_MIN <= value <= INT64_MAX, f"{name} must fit in int64, got {value}")
    _need(bpe is not None, "blocks_per_epoch is required when pack_sequences is set (an int or 'auto')")
    if bpe != "auto":
        _need(_is_int(bpe), f"blocks_per_epoch must be a positive integer or 'auto', got {bpe!r}")
        assert isinstance(bpe, int)
        _need(bpe > 0, f"blocks_per_epoch must be greater than 0, got {bpe}")
        _need(bpe <= INT64_MAX, f"blocks_per_epoch must fit in int64, got {bpe}")
        _need(
            bpe % num_splits == 0,
            f"blocks_per_epoch ({bpe}) must be divisible by num_splits ({num_splits})",
        )
    _need(p["transform"] is None, "transform cannot be combined with pack_sequences")
    columns = p["columns"]
    _need(
        isinstance(columns, (list, tuple)) and len(columns) == 1,
        "pack_sequences requires columns to name exactly one list column of token ids",
    )
    assert isinstance(columns, (list, tuple))
    kind = column_kind(columns[0])
    _need(kind is not None, f"unknown column {columns[0]!r}")
    _need(kind != "scalar", f"pack_sequences requires a list column; {columns[0]!r} is not a list")
    _need(kind == "int_list", f"pack_sequences requires integer tokens; {columns[0]!r} holds other values")
