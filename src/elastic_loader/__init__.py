"""elastic-loader: elastic, resumable streaming data loading for PyTorch over LanceDB.

Public API (a drop-in for ``lancedb.streaming``):

* :class:`StreamingDataset` -- the elastic, resumable ``IterableDataset``;
* :class:`StreamingDataLoader` -- a ``DataLoader`` with consumer-committed checkpoints;
* :func:`merge_state_dicts` -- merge every rank's checkpoint into one;
* :class:`Statistics` -- the snapshot returned by ``StreamingDataset.statistics()``;
* :class:`LocalShuffle` -- ``StreamingDataset(permutation=LocalShuffle(clump=, window=))``.

The executable specification lives in :mod:`elastic_loader.spec`, the shipped
conformance suite in :mod:`elastic_loader.testing`. The public names are loaded on
first use, so importing the spec alone does not import torch or LanceDB.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._exports import lazy_exports

if TYPE_CHECKING:  # the same names as _EXPORTS (tests/meta/test_exports.py checks it)
    from ._pipeline._mixture_source import MixtureSource as MixtureSource
    from ._pipeline._positions import LocalShuffle as LocalShuffle
    from ._pipeline._stats import Statistics as Statistics
    from ._pipeline.dataset import (
        DEFAULT_IO_QUEUE_DEPTH as DEFAULT_IO_QUEUE_DEPTH,
        DEFAULT_READ_BATCH_SIZE as DEFAULT_READ_BATCH_SIZE,
        StreamingDataset as StreamingDataset,
        merge_state_dicts as merge_state_dicts,
    )
    from ._pipeline.loader import StreamingDataLoader as StreamingDataLoader
    from ._pipeline.mixture import StreamingMixture as StreamingMixture

__version__ = "0.1.0"

_EXPORTS = {
    "StreamingDataset": "._pipeline.dataset",
    "StreamingDataLoader": "._pipeline.loader",
    "merge_state_dicts": "._pipeline.dataset",
    "Statistics": "._pipeline._stats",
    "LocalShuffle": "._pipeline._positions",
    "DEFAULT_READ_BATCH_SIZE": "._pipeline.dataset",
    "DEFAULT_IO_QUEUE_DEPTH": "._pipeline.dataset",
    "StreamingMixture": "._pipeline.mixture",
    "MixtureSource": "._pipeline._mixture_source",
}
"""Every public name, and the module that defines it (loaded on first use)."""

__all__ = [*_EXPORTS, "__version__"]

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, __all__)
