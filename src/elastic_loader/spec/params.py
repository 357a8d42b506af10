"""Constructor parameters: which values are rejected, in which order, with which error.

Rules: every check is one row of ``_INT_PARAMS`` or one ``require`` below, in
the order an implementation must apply them; the first failure wins. The table
is abstracted as :class:`TableFacts`. Every parameter has a type and a range:
integers are bounded above as well as below (``_MAXIMA``, else int64), so no
accepted value overflows a machine integer, a thread count or the byte budget.
A ``None`` default of a keyword the reference lacks (``read_ahead_bytes``,
``read_timeout``, ``pickle_storage_credentials``) stands for "not passed": the
implementation's default. ``permutation`` (D46) is a kind name or a
:class:`LocalShuffle`; a kind other than the builder refuses, after the
topology checks, what only the builder does (``_ONLY_BUILDER``, in order).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from .errors import SpecTypeError, SpecValueError, require

EPOCH_PRIME = 100003
"""``shuffle_seed + epoch * EPOCH_PRIME`` seeds the backend shuffle (R2.1 in spec/REFERENCE.md)."""
DEFAULT_READ_BATCH_SIZE = 64
DEFAULT_IO_QUEUE_DEPTH = 4
DEFAULT_READ_AHEAD_BYTES = 256 * 2**20
"""The byte budget of what one iterator reads and transforms ahead of its consumer (D40)."""
DEFAULT_READ_TIMEOUT = 300
"""Seconds a storage read may make no progress before the iterator raises (D41)."""
MAX_READ_TIMEOUT = 10**9
"""The largest finite ``read_timeout`` (``math.inf``: never time out)."""
MAX_THREADS = 1024
"""The largest thread count of a pool (``io_queue_depth``, ``transform_parallelism``)."""
BLOCK_BYTES_PER_TOKEN = 16
"""Bytes one token of a packed block takes: its ``input_ids`` and ``doc_ids`` entries (int64 each)."""
SEED_LIMIT = 2**64
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
ERROR_MODES = ("raise", "skip", "warn")
PERMUTATION_KINDS = ("builder", "computed", "local")
"""The kind names ``permutation`` accepts; ``"local"`` is ``LocalShuffle()`` (D46)."""
DEFAULT_CLUMP = 64
"""``LocalShuffle().clump``: rows per clump of ``permutation="local"`` (spec/LOCAL.md)."""
DEFAULT_WINDOW = 256
"""``LocalShuffle().window``: positions per shuffled window of ``permutation="local"``."""
MAX_LOCAL_SIZE = 2**64
"""The largest clump or window (a clump of every row of the largest table)."""

ColumnKind = Literal["int_list", "other_list", "scalar"]


def perm_seed(shuffle_seed: int, epoch: int) -> int:
    """The backend shuffle seed of an epoch (collisions are kept on purpose, see DEVIATIONS)."""
    return shuffle_seed + epoch * EPOCH_PRIME


@dataclass(frozen=True)
class TableFacts:
    """What validation needs to know about the table."""

    columns: Mapping[str, ColumnKind]
    """Schema column name -> kind (``int_list`` is a list of integers)."""
    rows: int
    """Rows that pass ``filter``."""


class _Callable:
    """Stands for "some callable" in parameter vectors."""

    def __call__(self, *args: object) -> object:
        return None

    def __repr__(self) -> str:
        return "CALLABLE"


CALLABLE = _Callable()


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class LocalShuffle:
    """``permutation=LocalShuffle(clump=C, window=W)``: the local permutation's parameters.

    Checked on construction, as the public ``LocalShuffle`` is, so a bad one never reaches the
    constructor: ``clump`` before ``window``, the type (``local_clump_type``, a bool is not an
    int) before the range ``[1, 2**64]`` (``local_clump_out_of_range``).
    """

    clump: int = DEFAULT_CLUMP
    window: int = DEFAULT_WINDOW

    def __post_init__(self) -> None:
        for name in ("clump", "window"):
            value = getattr(self, name)
            if not _is_int(value):
                raise SpecTypeError(
                    f"local_{name}_type", f"LocalShuffle.{name} must be an int, got {value!r}"
                )
            require(
                1 <= value <= MAX_LOCAL_SIZE,
                f"local_{name}_out_of_range",
                f"LocalShuffle.{name} must be in [1, 2**64], got {value}",
            )


Kind = Literal["builder", "computed"] | LocalShuffle
"""A resolved ``permutation``: ``"local"`` becomes ``LocalShuffle()``."""
DEFAULT_LOCAL = LocalShuffle()
"""What ``permutation="local"`` resolves to."""


@dataclass(frozen=True)
class Params:
    """Every keyword of ``StreamingDataset(table, ...)`` with its default."""

    num_splits: object = None
    shuffle: object = True
    split_strategy: object = None
    shuffle_seed: object = 0
    epoch: object = 0
    rank: object = 0
    world_size: object = 1
    read_batch_size: object = DEFAULT_READ_BATCH_SIZE
    io_queue_depth: object = DEFAULT_IO_QUEUE_DEPTH
    columns: object = None
    shuffle_clump_size: object = None
    filter: object = None
    transform: object = None
    transform_parallelism: object = None
    pack_sequences: object = None
    eos_id: object = None
    pad_id: object = None
    blocks_per_epoch: object = None
    on_transform_error: object = "raise"
    transform_queue_depth: object = None
    connection_factory: object = None
    worker_info_override: object = None
    prefetch_batches: object = None
    read_ahead_bytes: object = None
    """``None``: :data:`DEFAULT_READ_AHEAD_BYTES`."""
    read_timeout: object = None
    """``None``: :data:`DEFAULT_READ_TIMEOUT` seconds."""
    pickle_storage_credentials: object = None
    """``None``: not passed (``False``)."""
    permutation: object = "builder"
    """A name of :data:`PERMUTATION_KINDS` or a :class:`LocalShuffle` (D46)."""


@dataclass(frozen=True)
class Resolved:
    """Parameters after defaults are resolved."""

    num_splits: int
    io_queue_depth: int
    draws_seed: bool
    """``shuffle_seed=None``: the implementation draws one seed in ``[0, 2**32)``."""
    warnings: tuple[str, ...] = field(default=())
    read_ahead_bytes: int = DEFAULT_READ_AHEAD_BYTES
    read_timeout: int | float | None = DEFAULT_READ_TIMEOUT
    """Seconds; ``None``: reads never time out (``read_timeout=math.inf``)."""
    permutation: Kind = "builder"


# (name, may be None, minimum) for every integer parameter, checked in this order.
_INT_PARAMS: tuple[tuple[str, bool, int | None], ...] = (
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

_MAXIMA: Mapping[str, int] = {
    "shuffle_seed": SEED_LIMIT - 1,
    "epoch": SEED_LIMIT - 1,
    "transform_parallelism": MAX_THREADS,
}
"""Upper bounds of the integer parameters with a minimum; the others end at int64's maximum."""


def _seconds_ok(value: object) -> bool:
    return value is None or (isinstance(value, (int, float)) and not isinstance(value, bool))


def _worker_info_ok(value: object) -> bool:
    if value is None:
        return True
    if not (hasattr(value, "id") and hasattr(value, "num_workers")):
        return False
    return _is_int(value.id) and _is_int(value.num_workers)


# (name, predicate, description) for every non-integer parameter.
_OTHER_TYPES: tuple[tuple[str, Callable[[object], bool], str], ...] = (
    ("shuffle", lambda v: isinstance(v, bool), "a bool"),
    ("split_strategy", lambda v: v is None or callable(v), "None or callable"),
    ("filter", lambda v: v is None or isinstance(v, str), "None or a SQL string"),
    ("transform", lambda v: v is None or callable(v), "None or callable"),
    ("connection_factory", lambda v: v is None or callable(v), "None or callable"),
    (
        "columns",
        lambda v: v is None or (isinstance(v, (list, tuple)) and all(isinstance(c, str) for c in v)),
        "None or a list of column names",
    ),
    ("worker_info_override", _worker_info_ok, "None or an object with int .id and .num_workers"),
    ("read_timeout", _seconds_ok, "None or a number of seconds"),
    ("pickle_storage_credentials", lambda v: v is None or isinstance(v, bool), "a bool"),
)


def _check_types(p: Params) -> None:
    for name, nullable, _ in _INT_PARAMS:
        value = getattr(p, name)
        if value is None and nullable:
            continue
        if not _is_int(value):
            raise SpecTypeError(f"{name}_type", f"{name} must be an int, got {value!r}")
    for name, ok, what in _OTHER_TYPES:
        value = getattr(p, name)
        if not ok(value):
            raise SpecTypeError(f"{name}_type", f"{name} must be {what}, got {value!r}")
    if not isinstance(p.permutation, (str, LocalShuffle)):
        raise SpecTypeError(
            "permutation_type",
            f"permutation must be a kind name or a LocalShuffle(clump=, window=), got {p.permutation!r}",
        )


def _check_ranges(p: Params) -> None:
    for name, _, minimum in _INT_PARAMS:
        value = getattr(p, name)
        if minimum is not None and value is not None:
            assert isinstance(value, int)
            maximum = _MAXIMA.get(name, INT64_MAX)
            require(
                minimum <= value <= maximum,
                f"{name}_out_of_range",
                f"{name} must be in [{minimum}, {maximum}], got {value}",
            )
    timeout = p.read_timeout
    if timeout is not None:
        assert isinstance(timeout, (int, float))
        require(
            0 < timeout <= MAX_READ_TIMEOUT or timeout == math.inf,
            "read_timeout_out_of_range",
            f"read_timeout must be > 0 and <= {MAX_READ_TIMEOUT} seconds (or math.inf), got {timeout}",
        )
    info: Any = p.worker_info_override
    if info is not None:
        workers, worker = info.num_workers, info.id
        require(
            1 <= workers <= INT64_MAX and 0 <= worker < workers,
            "worker_info_override_out_of_range",
            f"worker_info_override needs 0 <= id < num_workers, got id={worker}, num_workers={workers}",
        )


_ONLY_BUILDER: tuple[tuple[str, str, Callable[[object], bool], str], ...] = (
    ("shuffle_false", "shuffle", lambda v: v is not True, "shuffle=False (storage order)"),
    ("split_strategy", "split_strategy", lambda v: v is not None, "split_strategy"),
    (
        "shuffle_clump_size",
        "shuffle_clump_size",
        lambda v: v is not None,
        "shuffle_clump_size (LocalShuffle has its own clump)",
    ),
    (
        "filter",
        "filter",
        lambda v: v is not None,
        "filter (positions would skip the filtered-out rows unevenly)",
    ),
)
"""What only the builder does, in checking order: (code suffix, keyword, is it used, what it is called)."""


def _check_permutation(p: Params) -> Kind:
    """The resolved kind; an unknown name, then each use of ``_ONLY_BUILDER`` with another kind, fails."""
    kind = p.permutation
    if isinstance(kind, str):
        require(
            kind in PERMUTATION_KINDS,
            "permutation_unknown",
            f"permutation must be one of {', '.join(map(repr, PERMUTATION_KINDS))}, got {kind!r}",
        )
        if kind == "builder":
            return "builder"
        resolved: Kind = DEFAULT_LOCAL if kind == "local" else "computed"
    else:
        assert isinstance(kind, LocalShuffle)
        resolved = kind
    for suffix, name, used, what in _ONLY_BUILDER:
        require(
            not used(getattr(p, name)),
            f"permutation_with_{suffix}",
            f"permutation={kind!r} shuffles every row by storage position and cannot be combined with "
            f"{what}; use permutation='builder' for it",
        )
    return resolved


def _check_packing(p: Params, num_splits: int, table: TableFacts) -> None:
    pack = p.pack_sequences
    if pack is None:
        require(
            p.blocks_per_epoch is None,
            "blocks_per_epoch_without_packing",
            "blocks_per_epoch requires pack_sequences",
        )
        return
    assert isinstance(pack, int)
    require(pack > 0, "pack_sequences_not_positive", "pack_sequences must be > 0")
    budget = DEFAULT_READ_AHEAD_BYTES if p.read_ahead_bytes is None else p.read_ahead_bytes
    assert isinstance(budget, int)
    require(
        pack * BLOCK_BYTES_PER_TOKEN <= budget,
        "pack_sequences_exceeds_budget",
        f"a block of pack_sequences={pack} tokens takes {pack * BLOCK_BYTES_PER_TOKEN} bytes, more than "
        f"read_ahead_bytes={budget}",
    )
    require(p.eos_id is not None, "eos_id_required", "eos_id is required with pack_sequences")
    require(p.pad_id is not None, "pad_id_required", "pad_id is required with pack_sequences")
    for name in ("eos_id", "pad_id"):
        value = getattr(p, name)
        assert isinstance(value, int)
        require(INT64_MIN <= value <= INT64_MAX, f"{name}_out_of_range", f"{name} must fit in int64")
    bpe = p.blocks_per_epoch
    require(bpe is not None, "blocks_per_epoch_required", "blocks_per_epoch is required with pack_sequences")
    if bpe != "auto":
        require(_is_int(bpe), "blocks_per_epoch_type", "blocks_per_epoch must be a positive int or 'auto'")
        assert isinstance(bpe, int)
        require(bpe > 0, "blocks_per_epoch_not_positive", "blocks_per_epoch must be > 0")
        require(bpe <= INT64_MAX, "blocks_per_epoch_out_of_range", "blocks_per_epoch must fit in int64")
        require(
            bpe % num_splits == 0,
            "blocks_per_epoch_not_divisible",
            f"blocks_per_epoch ({bpe}) must be divisible by num_splits ({num_splits})",
        )
    require(p.transform is None, "transform_with_packing", "transform cannot be combined with pack_sequences")
    cols = p.columns
    require(
        isinstance(cols, (list, tuple)) and len(cols) == 1,
        "packing_columns",
        "pack_sequences requires columns to name exactly one token column",
    )
    assert isinstance(cols, (list, tuple))
    kind = table.columns.get(cols[0])
    require(kind is not None, "unknown_column", f"unknown column {cols[0]!r}")
    require(kind != "scalar", "token_column_not_list", f"{cols[0]} is not a list column")
    require(kind == "int_list", "token_column_not_integer", f"{cols[0]} does not hold integers")


def validate_params(p: Params, table: TableFacts) -> Resolved:
    """Check constructor parameters in order; return the resolved values.

    Raises:
        SpecTypeError: a parameter has the wrong type.
        SpecValueError: a parameter is out of range or inconsistent.
    """
    _check_types(p)
    warnings: list[str] = []
    io_queue_depth = p.io_queue_depth
    if p.prefetch_batches is not None:
        warnings.append("prefetch_batches_deprecated")
        io_queue_depth = p.prefetch_batches
    assert isinstance(io_queue_depth, int)
    _check_ranges(p)
    world_size, rank = p.world_size, p.rank
    assert isinstance(world_size, int) and isinstance(rank, int)
    require(rank < world_size, "rank_out_of_range", f"rank ({rank}) must be < world_size ({world_size})")
    num_splits = world_size if p.num_splits is None else p.num_splits
    assert isinstance(num_splits, int)
    require(
        num_splits % world_size == 0,
        "num_splits_not_divisible_by_world_size",
        f"num_splits ({num_splits}) must be divisible by world_size ({world_size})",
    )
    seed, epoch = p.shuffle_seed, p.epoch
    assert isinstance(epoch, int)
    if seed is None:
        require(
            world_size == 1,
            "shuffle_seed_none_multi_rank",
            "shuffle_seed=None would draw a different seed on every rank; pass one seed",
        )
    else:
        assert isinstance(seed, int)
        require(
            perm_seed(seed, epoch) < SEED_LIMIT,
            "shuffle_seed_out_of_range",
            "shuffle_seed + epoch * 100003 must be < 2**64",
        )
    kind = _check_permutation(p)
    require(
        0 < io_queue_depth <= MAX_THREADS,
        "io_queue_depth_out_of_range",
        f"io_queue_depth must be in [1, {MAX_THREADS}]",
    )
    _check_packing(p, num_splits, table)
    mode = p.on_transform_error
    require(
        mode in ERROR_MODES or callable(mode),
        "on_transform_error_invalid",
        f"on_transform_error must be 'raise', 'skip', 'warn' or a callable, got {mode!r}",
    )
    cols = p.columns
    if cols is not None:
        assert isinstance(cols, (list, tuple))
        require(len(cols) > 0, "columns_empty", "columns must name at least one column")
        require(len(set(cols)) == len(cols), "columns_duplicate", "columns must not repeat")
        for name in cols:
            if name not in table.columns:
                raise SpecValueError("unknown_column", f"unknown column {name!r}")
    require(
        table.rows >= num_splits,
        "fewer_rows_than_splits",
        f"{table.rows} rows cannot fill {num_splits} splits of at least one row",
    )
    budget = DEFAULT_READ_AHEAD_BYTES if p.read_ahead_bytes is None else p.read_ahead_bytes
    timeout = DEFAULT_READ_TIMEOUT if p.read_timeout is None else p.read_timeout
    assert isinstance(budget, int) and isinstance(timeout, (int, float))
    return Resolved(
        num_splits,
        io_queue_depth,
        seed is None,
        tuple(warnings),
        budget,
        None if timeout == math.inf else timeout,
        kind,
    )
