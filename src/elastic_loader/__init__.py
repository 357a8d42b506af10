"""elastic-loader: elastic, resumable streaming data loading for PyTorch over LanceDB.

Public API (a drop-in for ``lancedb.streaming``):

* :class:`StreamingDataset` -- the elastic, resumable ``IterableDataset``;
* :class:`StreamingDataLoader` -- a ``DataLoader`` with consumer-committed checkpoints;
* :func:`merge_state_dicts` -- merge every rank's checkpoint into one;
* :class:`Statistics` -- the snapshot returned by ``StreamingDataset.statistics()``.

The executable specification lives in :mod:`elastic_loader.spec`, the shipped
conformance suite in :mod:`elastic_loader.testing`. The public names are loaded on
first use, so importing the spec alone does not import torch or LanceDB.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._pipeline._stats import Statistics
    from ._pipeline.dataset import (
        DEFAULT_IO_QUEUE_DEPTH,
        DEFAULT_READ_BATCH_SIZE,
        StreamingDataset,
        merge_state_dicts,
    )
    from ._pipeline.loader import StreamingDataLoader

__version__ = "0.1.0"

_EXPORTS = {
    "StreamingDataset": "._pipeline.dataset",
    "merge_state_dicts": "._pipeline.dataset",
    "DEFAULT_READ_BATCH_SIZE": "._pipeline.dataset",
    "DEFAULT_IO_QUEUE_DEPTH": "._pipeline.dataset",
    "StreamingDataLoader": "._pipeline.loader",
    "Statistics": "._pipeline._stats",
}

__all__ = [
    "StreamingDataset",
    "StreamingDataLoader",
    "merge_state_dicts",
    "Statistics",
    "DEFAULT_READ_BATCH_SIZE",
    "DEFAULT_IO_QUEUE_DEPTH",
    "__version__",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'elastic_loader' has no attribute {name!r}")
    value = getattr(import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
