"""Black-box vector replay: the vector families a ``lancedb.streaming``-API implementation can answer.

``merge`` (``merge_state_dicts``, provenance and digest included), ``load``
(``load_state_dict`` on the vector's rank, then ``state_dict``: plain progress,
projections, cursor and table pin), ``checkpoint_snapshot`` (the expected
checkpoint loaded on the rank whose splits it reports, then ``state_dict``) and
``params`` (constructor validation on a table with the vector's columns and row
count) are asked of the implementation; :data:`VECTOR_FAMILIES` says for every
other family why it is not applicable and which invariant covers it on real
tables instead (``spec/VECTORS.md``, "Black-box replay and model-only families").

Rules of this module: an expected error matches when the implementation raises
that builtin class (or a subclass); the spec's error *code* is not observable
from outside and is not compared. A case the public API cannot express is
*not applicable* (:class:`_NotApplicable`), never a failure. The ``elastic_loader``
key is compared only for an implementation whose checkpoints carry it (a fresh
dataset's ``state_dict()`` has it); for one that writes the reference's keys
alone (``lancedb.streaming``), checkpoints are compared on those keys and a
``state_dict()`` after a load on its plain progress. A checkpoint that pins a
table version is replayed on a conformance table restored until it has that
version.
"""

from __future__ import annotations

import builtins
import dataclasses
import importlib
import json
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

import lancedb
import pyarrow as pa

from ...spec import RunConfig, SpecError, load_saved
from ...spec.params import CALLABLE, LocalShuffle, Params
from ...spec.saved import EXTRA_KEY, Saved
from ...spec.topology import rank_splits
from ..adapters import DatasetLike, Implementation, accepts
from ..tables import TOKEN_COLUMN, TableCache, TableKey, build_table
from ..vectors import FAMILIES, VectorCase, default_directory, load_vectors
from ..vectors.codec import (
    Json,
    JsonObject,
    as_int,
    as_list,
    as_object,
    as_str,
    dec_config,
    decode_value,
    enc_checkpoint,
    enc_provenance,
    enc_state,
    encode_int,
)
from .progress import ProgressCallback, ProgressEvent
from .report import VectorCaseResult, VectorResult, VectorStatus, first_line

_MAX_PINNED_VERSION = 64
"""The largest table version a conformance table is restored up to (a pin beyond is not applicable)."""


class _NotApplicable(Exception):
    """This case cannot be asked of the implementation through its public API."""


_BLACK_BOX = {
    "merge": "merge_state_dicts(checkpoints), provenance and digest included if the implementation writes "
    "the elastic_loader key; error class compared, not the spec's code",
    "load": "load_state_dict(checkpoint) on the vector's rank of a fresh dataset of the config, then "
    "state_dict(): progress (and projections, cursor, table pin if it writes the key); error class compared",
    "checkpoint_snapshot": "state_dict() of a dataset on the rank whose splits the expected checkpoint "
    "reports, after loading it; keys, key order (and provenance and digest if it writes the key) compared",
    "params": "StreamingDataset(table, **params) on a table with the vector's columns and rows; error "
    "class, resolved num_splits, drawn seed and DeprecationWarning compared (io_queue_depth is not "
    "observable)",
}

VECTOR_FAMILIES: Mapping[str, str] = {
    "topology": "split ownership is internal; PartitionInv checks it on real runs",
    "row_order": "takes arbitrary permutations and faults; the machines run real tables",
    "packing": "takes arbitrary permutations and corpora; the machines run real tables",
    **_BLACK_BOX,
    "commit": "the consumer commit is internal; ConsumerCommitProp checks it end to end",
    "auto_budget": "takes arbitrary document lengths; AutoBudgetInv checks real tables",
    "loader": "takes arbitrary permutations; the machines run StreamingDataLoader on tables",
    "schedule": "internal delivery arithmetic; LockstepInferenceInv checks its use on real runs",
    "rank_checkpoint": "takes arbitrary sessions and passes; LockstepInferenceInv checks state_dict() of "
    "real sessions",
    "resolve": "internal replay of projections; ProtocolChainProp checks resumed runs",
    "table_pin": "takes arbitrary table histories; TableVersionPinInv checks real table versions",
    "protocols": "takes arbitrary permutations and faults; ProtocolChainProp and SameTopologyResumeProp "
    "check chains on real tables",
    "mixture": "takes arbitrary permutations; the mixture machine checks StreamingMixture on real tables "
    "(only where the implementation has mixtures)",
    "computed_order": "storage positions are internal (the reference has no permutation keyword); "
    "ComputedBijectionInv and the Local invariants check real tables",
}
"""Every vector family and how it is run against an implementation (or why it cannot be)."""

_ERROR_CLASSES: Mapping[str, type[Exception]] = {
    "ValueError": ValueError,
    "TypeError": TypeError,
    "RuntimeError": RuntimeError,
}


def _compact(value: object, limit: int = 400) -> str:
    try:
        text = json.dumps(value, default=repr)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _describe(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}({first_line(lines[-1] if lines else '', 200)!r})"


def _expected_error(expected: JsonObject) -> tuple[str, str] | None:
    error = expected.get("error")
    if not isinstance(error, dict):
        return None
    return as_str(error["class"]), as_str(error["code"])


def _judge_error(error: Exception, expected: JsonObject, call: str) -> str | None:
    want = _expected_error(expected)
    if want is None:
        return f"{call} raised {_describe(error)}; the spec gives {_compact(expected)}"
    cls = _ERROR_CLASSES.get(want[0], getattr(builtins, want[0], Exception))
    if isinstance(error, cls):
        return None
    return f"{call} raised {_describe(error)}; the spec raises {want[0]} ({want[1]})"


def _judge_success(expected: JsonObject, what: str) -> str | None:
    """``None`` when the spec expects no error; else the complaint that ``what`` happened instead."""
    want = _expected_error(expected)
    if want is None:
        return None
    return f"{what}; the spec raises {want[0]} ({want[1]})"


def _diff(got: Json, expected: Json, what: str) -> str | None:
    if json.dumps(got) == json.dumps(expected):
        return None
    return f"{what}: got {_compact(got)}; the spec gives {_compact(expected)}"


@dataclass
class _VectorContext:
    """Tables and datasets for replaying vectors against one implementation."""

    implementation: Implementation
    directory: Path
    tables: TableCache = field(init=False)
    _params_tables: dict[tuple[tuple[tuple[str, str], ...], int], object] = field(default_factory=dict)

    _provenance: bool | None = field(default=None, init=False)
    _versioned: dict[tuple[TableKey, int], object] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.tables = TableCache(self.directory)

    @property
    def writes_provenance(self) -> bool:
        """The implementation's checkpoints carry the ``elastic_loader`` key (a fresh dataset's does)."""
        if self._provenance is None:
            self._provenance = EXTRA_KEY in self.dataset(RunConfig(1, 0, 0), 1).state_dict()
        return self._provenance

    def comparable(self, expected: JsonObject) -> JsonObject:
        """An expected checkpoint (``enc_checkpoint`` form) as this implementation is judged on it."""
        if self.writes_provenance or "checkpoint" not in expected:
            return expected
        checkpoint = as_object(expected["checkpoint"])
        return {
            "checkpoint": {k: v for k, v in checkpoint.items() if k != EXTRA_KEY},
            "keys": [k for k in as_list(expected["keys"]) if k != EXTRA_KEY],
        }

    def dataset(
        self,
        config: RunConfig,
        split_len: int,
        world_size: int = 1,
        rank: int = 0,
        version: int | None = None,
    ) -> DatasetLike:
        """A fresh dataset of ``config`` (rank ``rank`` of ``world_size``) over ``S * split_len`` rows,
        of a table at version ``version`` when one is given."""
        params: dict[str, object] = {
            "num_splits": config.num_splits,
            "shuffle": True,
            "shuffle_seed": config.shuffle_seed,
            "epoch": config.epoch,
            "rank": rank,
            "world_size": world_size,
        }
        if config.packing is not None:
            params.update(
                columns=[TOKEN_COLUMN],
                pack_sequences=config.packing.pack_sequences,
                eos_id=config.packing.eos_id,
                pad_id=config.packing.pad_id,
                blocks_per_epoch=config.packing.blocks_per_epoch,
            )
        key = TableKey(config.num_splits * max(1, split_len))
        table = self.tables.table(key) if version is None else self.versioned_table(key, version)
        try:
            return self.implementation.dataset(table, **params)
        except Exception as error:
            raise AssertionError(
                f"StreamingDataset(table, **{params!r}) raised {_describe(error)}; the spec accepts it"
            ) from error

    def versioned_table(self, key: TableKey, version: int) -> object:
        """The table of ``key`` at version ``version``: built, then restored to its first version until
        it has that version (the rows stay those of ``key``)."""
        if not 1 <= version <= _MAX_PINNED_VERSION:
            raise _NotApplicable(f"no conformance table has version {version}")
        if (key, version) not in self._versioned:
            table = build_table(self.directory / f"v{version}", key)
            first = table.version  # type: ignore[attr-defined]
            if first > version:
                raise _NotApplicable(f"the table of {key.rows} rows starts at version {first} > {version}")
            while table.version < version:  # type: ignore[attr-defined]
                table.checkout(first)  # type: ignore[attr-defined]
                table.restore()  # type: ignore[attr-defined]
            self._versioned[(key, version)] = table
        return self._versioned[(key, version)]

    def params_table(self, columns: Mapping[str, str], rows: int) -> object:
        """A table with ``rows`` rows and one column per kind (int lists, string lists, floats 1.0)."""
        key = (tuple(sorted(columns.items())), rows)
        if key not in self._params_tables:
            arrays: dict[str, pa.Array] = {}
            for name, kind in sorted(columns.items()):
                if kind == "int_list":
                    arrays[name] = pa.array([[i, i + 1] for i in range(rows)], pa.list_(pa.int64()))
                elif kind == "other_list":
                    arrays[name] = pa.array([["a"] for _ in range(rows)], pa.list_(pa.string()))
                else:
                    arrays[name] = pa.array([1.0] * rows, pa.float64())
            db = lancedb.connect(str(self.directory))
            name = f"params_{len(self._params_tables)}"
            self._params_tables[key] = db.create_table(name, pa.table(arrays), mode="overwrite")
        return self._params_tables[key]


def _read_back(dataset: DatasetLike, config: RunConfig, split_len: int) -> Saved:
    """The dataset's ``state_dict()`` as the spec reads it."""
    state = dataset.state_dict()
    try:
        return load_saved(config, state, split_len)
    except SpecError as error:
        raise AssertionError(
            f"state_dict() gave {_compact(state)}, which the spec cannot read: {error}"
        ) from error


def _loaded(saved: Saved) -> JsonObject:
    """What a ``state_dict()`` right after a load must say: the plain progress, the projections,
    the cursor and the table pin (it reports the loading rank's own splits, whatever was loaded)."""
    provenance = enc_provenance(saved)
    return {"state": enc_state(saved.state), **{k: provenance[k] for k in ("projected", "cursor", "table")}}


def _pinned_version(checkpoint: object) -> int | None:
    """The table version the checkpoint pins, when it is one a table could have (a malformed version,
    negative or not an integer, is refused by any implementation on any table)."""
    extra = checkpoint.get(EXTRA_KEY) if isinstance(checkpoint, Mapping) else None
    table = extra.get("table") if isinstance(extra, Mapping) else None
    version = table.get("version") if isinstance(table, Mapping) else None
    valid = isinstance(version, int) and not isinstance(version, bool) and version >= 0
    return version if valid else None


def _vector_merge(ctx: _VectorContext, case: VectorCase) -> str | None:
    checkpoints = [cast(Mapping[str, object], decode_value(c)) for c in as_list(case["input"]["checkpoints"])]
    expected = case["output"]
    try:
        merged = ctx.implementation.merge_state_dicts(checkpoints)
    except Exception as error:
        return _judge_error(error, expected, "merge_state_dicts")
    if (
        problem := _judge_success(expected, f"merge_state_dicts returned {_compact(merged, 200)}")
    ) is not None:
        return problem
    if not isinstance(merged, Mapping):
        return f"merge_state_dicts returned {merged!r}, not a dict"
    try:
        got = enc_checkpoint(merged)
    except TypeError as error:
        return f"merge_state_dicts returned {_compact(merged)}: {error}"
    return _diff(cast(Json, got), cast(Json, ctx.comparable(expected)), "merged checkpoint")


def _vector_load(ctx: _VectorContext, case: VectorCase) -> str | None:
    given = case["input"]
    config = dec_config(given["config"])
    split_len = as_int(given["split_len"])
    world_size, rank = as_int(given["world_size"]), as_int(given["rank"])
    if config.perm_fingerprint is not None:
        raise _NotApplicable("needs a split_strategy dataset (perm_fingerprint)")
    if world_size < 1 or not 0 <= rank < world_size or config.num_splits % world_size:
        raise _NotApplicable("no dataset has this topology (the params vectors check its refusal)")
    checkpoint = decode_value(given["checkpoint"])
    expected = case["output"]
    dataset = ctx.dataset(config, split_len, world_size, rank, _pinned_version(checkpoint))
    try:
        dataset.load_state_dict(cast(Mapping[str, object], checkpoint))
    except Exception as error:
        return _judge_error(error, expected, "load_state_dict")
    if (problem := _judge_success(expected, "load_state_dict accepted it")) is not None:
        return problem
    fields = ("state", "projected", "cursor", "table") if ctx.writes_provenance else ("state",)
    got = _loaded(_read_back(dataset, config, split_len))
    return _diff({k: got[k] for k in fields}, {k: expected[k] for k in fields}, "state_dict() after the load")


def _loading_rank(num_splits: int, reported: list[Json]) -> tuple[int, int]:
    """The ``(world_size, rank)`` whose rank block is exactly ``reported``."""
    if not reported or num_splits % len(reported):
        raise _NotApplicable(f"no rank owns exactly the splits {reported}")
    world_size = num_splits // len(reported)
    for rank in range(world_size):
        if list(rank_splits(num_splits, world_size, rank)) == reported:
            return world_size, rank
    raise _NotApplicable(f"no rank owns exactly the splits {reported}")


def _snapshot_split_len(config: RunConfig, state: JsonObject, table: Json) -> int:
    """A split length the expected checkpoint loads with: the pinned row count's, else the progress."""
    progress = as_list(state["positions"] if config.packing is None else state["consumed"])
    needed = max([1, *(as_int(v) for v in progress)])
    if table is None:
        return needed
    rows = as_int(as_object(table)["rows"])
    if rows % config.num_splits or rows // config.num_splits < needed:
        raise _NotApplicable(f"no table of {rows} rows holds this progress in {config.num_splits} splits")
    return rows // config.num_splits


def _vector_snapshot(ctx: _VectorContext, case: VectorCase) -> str | None:
    given = case["input"]
    config = dec_config(given["config"])
    expected = case["output"]
    if _expected_error(expected) is not None:
        raise _NotApplicable("the spec refuses to write it; no dataset holds such a state")
    if config.perm_fingerprint is not None:
        raise _NotApplicable("needs a split_strategy dataset (perm_fingerprint)")
    payload = cast(Mapping[str, object], decode_value(expected["checkpoint"]))
    world_size, rank = _loading_rank(config.num_splits, as_list(given["reported"]))
    split_len = _snapshot_split_len(config, as_object(given["state"]), given["table"])
    dataset = ctx.dataset(config, split_len, world_size, rank, _pinned_version(payload))
    try:
        dataset.load_state_dict(dict(payload))
    except Exception as error:
        return f"load_state_dict({_compact(payload, 200)}) raised {_describe(error)}"
    state = dataset.state_dict()
    if not isinstance(state, Mapping):
        return f"state_dict() returned {state!r}"
    return _diff(cast(Json, enc_checkpoint(state)), cast(Json, ctx.comparable(expected)), "state_dict()")


_PARAM_DEFAULTS: Mapping[str, object] = {f.name: f.default for f in dataclasses.fields(Params)}


def _vector_params(ctx: _VectorContext, case: VectorCase) -> str | None:
    given = case["input"]
    decoded, kwargs = _params_kwargs(given)
    _permutation_kwarg(ctx.implementation, kwargs)
    table = _params_table(ctx, given, kwargs)
    expected = case["output"]
    call = "StreamingDataset(table, " + ", ".join(f"{k}={v!r}" for k, v in sorted(kwargs.items())) + ")"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            dataset = ctx.implementation.dataset(table, **kwargs)
        except TypeError as error:
            if "unexpected keyword argument" in str(error):
                raise _NotApplicable(f"the implementation has no such keyword: {error}") from error
            return _judge_error(error, expected, call)
        except Exception as error:
            return _judge_error(error, expected, call)
    if (problem := _judge_success(expected, f"{call} succeeded")) is not None:
        return problem
    deprecated = any(
        issubclass(w.category, DeprecationWarning) and "prefetch_batches" in str(w.message) for w in caught
    )
    warned = ["prefetch_batches_deprecated"] if deprecated else []
    problems: list[str] = []
    if warned != expected["warnings"]:
        problems.append(f"warnings {warned}, the spec {expected['warnings']}")
    state: Mapping[str, object] | None = None
    try:
        state = dataset.state_dict()
    except Exception as error:
        # A simulated worker whose rank's splits its workers cannot share owns no splits: its
        # checkpoint is undefined (it may refuse to write one), so the resolved values are not
        # observable through it.
        if not (isinstance(error, ValueError) and _worker_without_block(decoded, expected)):
            return f"{call}.state_dict() raised {_describe(error)}"
    if state is not None:
        problems += _resolved_problems(state, decoded, expected)
    return f"{call}: " + "; ".join(problems) if problems else None


def _params_kwargs(given: JsonObject) -> tuple[dict[str, object], dict[str, object]]:
    """The decoded parameters, and the keywords to pass (``None`` defaults left out, callables stood in)."""
    decoded = {name: decode_value(value) for name, value in as_object(given["params"]).items()}
    for name in ("split_strategy", "connection_factory"):
        if decoded.get(name) is CALLABLE:
            raise _NotApplicable(f"needs a working {name}")
    # Keywords left at a default of None are not passed (an implementation may lack rare keywords).
    kwargs = {k: v for k, v in decoded.items() if not (v is None and _PARAM_DEFAULTS.get(k, 0) is None)}
    for name, value in kwargs.items():
        if value is CALLABLE:
            kwargs[name] = _some_callable
    return decoded, kwargs


def _permutation_kwarg(implementation: Implementation, kwargs: dict[str, object]) -> None:
    """``permutation`` as the implementation takes it: left out at ``"builder"`` for one without the
    keyword (the builder is its only permutation); a ``LocalShuffle`` of its own module."""
    if not accepts(implementation, "permutation"):
        if kwargs.get("permutation") == "builder":
            del kwargs["permutation"]
        return
    value = kwargs.get("permutation")
    if isinstance(value, LocalShuffle):
        dataset_class = getattr(implementation, "dataset_class", None)  # accepts() found it
        own = getattr(importlib.import_module(dataset_class.__module__), "LocalShuffle", None)
        if own is None:
            raise _NotApplicable("the implementation has no LocalShuffle")
        kwargs["permutation"] = own(clump=value.clump, window=value.window)


def _params_table(ctx: _VectorContext, given: JsonObject, kwargs: Mapping[str, object]) -> object:
    """A table with the vector's columns and rows, where the filter (if any) keeps every row."""
    facts = as_object(given["table"])
    columns = {name: as_str(kind) for name, kind in as_object(facts["columns"]).items()}
    rows = as_int(facts["rows"])
    table = ctx.params_table(columns, rows)
    flt = kwargs.get("filter")
    if isinstance(flt, str) and table.count_rows(flt) != rows:  # type: ignore[attr-defined]
        raise _NotApplicable(f"cannot build a table where exactly {rows} rows pass {flt!r}")
    return table


def _resolved_problems(
    state: Mapping[str, object], decoded: Mapping[str, object], expected: JsonObject
) -> list[str]:
    """How the dataset's resolved ``num_splits`` and seed differ from the spec's."""
    problems: list[str] = []
    if encode_int(cast(int, state.get("num_splits"))) != expected["num_splits"] or not isinstance(
        state.get("num_splits"), int
    ):
        problems.append(f"num_splits {state.get('num_splits')!r}, the spec {expected['num_splits']}")
    seed = state.get("shuffle_seed")
    if expected["draws_seed"]:
        if not (isinstance(seed, int) and 0 <= seed < 2**32):
            problems.append(f"shuffle_seed=None drew {seed!r}, the spec draws one in [0, 2**32)")
    elif seed != decoded["shuffle_seed"]:
        problems.append(f"shuffle_seed {seed!r}, given {decoded['shuffle_seed']!r}")
    return problems


def _worker_without_block(decoded: Mapping[str, object], expected: JsonObject) -> bool:
    """``worker_info_override`` names more workers than can share the rank's resolved splits."""
    override = decoded.get("worker_info_override")
    workers, world_size = getattr(override, "num_workers", None), decoded.get("world_size")
    if not isinstance(workers, int) or not isinstance(world_size, int) or world_size < 1 or workers < 2:
        return False
    return (as_int(expected["num_splits"]) // world_size) % workers != 0


def _some_callable(*args: object, **kwargs: object) -> object:
    """Stands for ``{"$": "callable"}`` (a transform or error handler that is never called here)."""
    raise AssertionError("the conformance vectors never call this")


_RUNNERS: Mapping[str, Callable[[_VectorContext, VectorCase], str | None]] = {
    "merge": _vector_merge,
    "load": _vector_load,
    "checkpoint_snapshot": _vector_snapshot,
    "params": _vector_params,
}


def _cases(family: str, directory: Path | str | None) -> tuple[list[VectorCase], str]:
    """The committed cases of ``family``, or (no files) the same cases generated from the spec."""
    try:
        return load_vectors(family, directory), str(default_directory() if directory is None else directory)
    except FileNotFoundError:
        built: list[VectorCase] = []
        for case in FAMILIES[family].cases():
            vector = case.build()
            built.append(
                {
                    "name": case.name,
                    "description": case.description,
                    "input": vector.input,
                    "output": vector.output,
                }
            )
        return built, "generated from the spec in memory (no vector files found)"


def run_vectors(
    implementation: Implementation,
    directory: Path,
    vectors_dir: Path | str | None,
    progress: ProgressCallback | None,
) -> tuple[tuple[VectorResult, ...], str]:
    ctx = _VectorContext(implementation, directory)
    results: list[VectorResult] = []
    sources: set[str] = set()
    for family, note in VECTOR_FAMILIES.items():
        runner = _RUNNERS.get(family)
        if runner is None:
            results.append(VectorResult(family, "not-applicable", note=note))
            continue
        cases, source = _cases(family, vectors_dir)
        sources.add(source)
        passed = 0
        failures: list[VectorCaseResult] = []
        skipped: list[VectorCaseResult] = []
        for done, case in enumerate(cases, 1):
            try:
                problem = runner(ctx, case)
            except _NotApplicable as reason:
                skipped.append(VectorCaseResult(case["name"], str(reason)))
            except AssertionError as error:
                failures.append(VectorCaseResult(case["name"], str(error)))
            except Exception as error:
                failures.append(VectorCaseResult(case["name"], f"unexpected {_describe(error)}"))
            else:
                if problem is None:
                    passed += 1
                else:
                    failures.append(VectorCaseResult(case["name"], problem))
            if progress is not None:
                progress(ProgressEvent("vectors", family, done, len(cases), "cases", done == len(cases)))
        status: VectorStatus = "fail" if failures else ("pass" if passed else "not-applicable")
        results.append(VectorResult(family, status, passed, tuple(failures), tuple(skipped), note))
    return tuple(results), "; ".join(sorted(sources))
