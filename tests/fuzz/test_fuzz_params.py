"""Fuzzing constructor parameters (issue 13): every input is rejected with a TypeError or
ValueError of the spec's class (``validate_params``), or accepted, and then the first item and
``len()`` come without error. ``FUZZ_EXAMPLES`` sets the budget (``make fuzz``: deep)."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
from fuzz_support import FUZZ, HOSTILE, ROWS, build_table
from hypothesis import given, strategies as st

from elastic_loader import StreamingDataset
from elastic_loader.spec import params as spec_params
from elastic_loader.spec.errors import SpecError

KINDS: dict[str, spec_params.ColumnKind] = {"id": "scalar", "tokens": "int_list"}
NAMES = [
    "num_splits",
    "shuffle",
    "shuffle_seed",
    "rank",
    "world_size",
    "epoch",
    "read_batch_size",
    "io_queue_depth",
    "columns",
    "shuffle_clump_size",
    "transform_parallelism",
    "pack_sequences",
    "eos_id",
    "pad_id",
    "blocks_per_epoch",
    "transform_queue_depth",
    "read_ahead_bytes",
    "read_timeout",
    "pickle_storage_credentials",
    "prefetch_batches",
    "on_transform_error",
]
GOOD: dict[str, tuple[object, ...]] = {
    "columns": (["id"], ["tokens"], ["tokens", "id"]),
    "on_transform_error": ("raise", "skip", "warn"),
    "blocks_per_epoch": (4, 8, "auto"),
    "read_timeout": (0.5, 30, 300.0),
}
PACK = {"pack_sequences": 4, "eos_id": 1, "pad_id": 0, "blocks_per_epoch": 8, "columns": ["tokens"]}


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return build_table(str(tmp_path_factory.mktemp("fuzz_params")))


def spec_class(kwargs: dict[str, Any]) -> type[Exception] | None:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            spec_params.validate_params(spec_params.Params(**kwargs), spec_params.TableFacts(KINDS, ROWS))
    except SpecError as exc:
        return TypeError if isinstance(exc, TypeError) else ValueError
    return None


@st.composite
def kwarg_sets(draw: st.DrawFn) -> dict[str, Any]:
    base: dict[str, Any] = {"num_splits": 4, **(PACK if draw(st.booleans()) else {})}
    for name in draw(st.lists(st.sampled_from(NAMES), min_size=1, max_size=4, unique=True)):
        values = HOSTILE + GOOD.get(name, ())
        base[name] = draw(st.sampled_from(values))
    return base


@FUZZ
@given(kwargs=kwarg_sets())
def test_every_parameter_set_is_rejected_typed_or_iterates(table: Any, kwargs: dict[str, Any]) -> None:
    expected = spec_class(kwargs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            ds = StreamingDataset(table, **kwargs)
        except (TypeError, ValueError) as exc:
            assert type(exc) is expected, (kwargs, exc)
            return
    assert expected is None, (kwargs, expected)
    assert isinstance(len(ds), int)
    it = iter(ds)
    try:
        next(it)
    except StopIteration:
        assert len(ds) == 0
    finally:
        it.close()  # type: ignore[attr-defined]
