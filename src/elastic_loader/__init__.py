"""elastic-loader: elastic, resumable streaming data loading for PyTorch over LanceDB.

Public API (a drop-in for ``lancedb.streaming``):

* :class:`StreamingDataset` -- the elastic, resumable ``IterableDataset``;
* :class:`StreamingDataLoader` -- a ``DataLoader`` with consumer-committed checkpoints;
* :func:`merge_state_dicts` -- merge every rank's checkpoint into one;
* :class:`Statistics` -- the snapshot returned by ``StreamingDataset.statistics()``.

The executable specification lives in :mod:`elastic_loader.spec`, the shipped
conformance suite in :mod:`elastic_loader.testing`.
"""

from ._pipeline._stats import Statistics
from ._pipeline.dataset import (
    DEFAULT_IO_QUEUE_DEPTH,
    DEFAULT_READ_BATCH_SIZE,
    StreamingDataset,
    merge_state_dicts,
)
from ._pipeline.loader import StreamingDataLoader

__version__ = "0.1.0"

__all__ = [
    "StreamingDataset",
    "StreamingDataLoader",
    "merge_state_dicts",
    "Statistics",
    "DEFAULT_READ_BATCH_SIZE",
    "DEFAULT_IO_QUEUE_DEPTH",
    "__version__",
]
