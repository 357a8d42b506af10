"""StreamingDataLoader: a torch DataLoader whose checkpoints count only delivered batches.

Rules: every batch a worker produces carries the worker's checkpoint right
after the batch's last item; the parent commits it into its dataset when the
batch is returned by next(), never earlier. A failed batch disables
checkpoints until a checkpoint is loaded. Workers start with a start method
that is safe with LanceDB (not fork) unless the caller chooses one.

The loader reaches its dataset only through ``dataset.LoaderLink``. The collate
finds the dataset whose checkpoint goes with a batch through torch's worker
info in a worker process, through the adapter it holds in the main process.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.context
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from .._exports import public
from .dataset import LoaderLink, StreamingDataset

# Fork is unsafe once LanceDB's runtime threads exist in the parent (the child inherits
# locks held by threads that do not exist there). A fork server is a fresh process
# that never imports LanceDB or lance: it preloads torch, NumPy and pyarrow once, and
# workers fork from it cheaply. Without fork servers (Windows), workers spawn.
_PRELOAD = ["torch", "numpy", "pyarrow", "elastic_loader._pipeline.loader"]


def default_context() -> multiprocessing.context.BaseContext:
    """The start method StreamingDataLoader uses when the caller does not choose one."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    from multiprocessing import forkserver

    if getattr(forkserver._forkserver, "_forkserver_pid", None) is None:  # not started: choose preloads
        context.set_forkserver_preload(_PRELOAD)
    return context


# DataLoader.__init__ parameters by position after ``dataset`` (torch >= 2.3).
_POSITIONAL = (
    "batch_size",
    "shuffle",
    "sampler",
    "batch_sampler",
    "num_workers",
    "collate_fn",
    "pin_memory",
    "drop_last",
    "timeout",
    "worker_init_fn",
    "multiprocessing_context",
)


class _Delivered(NamedTuple):
    data: Any
    state: dict[str, object]
    worker: int | None
    """The torch worker that produced the batch (``None``: the main process)."""


class _Adapter(IterableDataset[Any]):
    """What torch iterates: the dataset's items, with the consumer-commit transport on."""

    def __init__(self, dataset: StreamingDataset) -> None:
        super().__init__()
        self.dataset = dataset
        self.link = LoaderLink(dataset)

    def __iter__(self) -> Iterator[Any]:
        return self.link.items()

    def __len__(self) -> int:
        return len(self.dataset)

    def __getattr__(self, name: str) -> Any:
        dataset = self.__dict__.get("dataset")
        if dataset is None:
            raise AttributeError(name)
        return getattr(dataset, name)


class _CommitCollate:
    """Collate as usual, then attach the producing dataset's checkpoint.

    The producing dataset is the one this process iterates: in a worker
    process, torch's ``get_worker_info().dataset`` (the worker's copy of the
    adapter); in the main process (``num_workers=0``), the loader's own adapter,
    which this collate holds and leaves behind when it is pickled for a worker.
    """

    def __init__(self, collate_fn: Callable[[Any], Any], adapter: _Adapter) -> None:
        self.collate_fn = collate_fn
        self._adapter: _Adapter | None = adapter

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_adapter": None}

    def __call__(self, samples: Any) -> _Delivered:
        try:
            data = self.collate_fn(samples)
        except StopIteration as exc:
            raise RuntimeError("collate_fn raised StopIteration") from exc
        info = get_worker_info()
        adapter = info.dataset if info is not None else self._adapter
        if not isinstance(adapter, _Adapter):
            raise RuntimeError("StreamingDataLoader collate ran outside of a dataset iteration")
        return _Delivered(data, adapter.link.snapshot(), None if info is None else info.id)


_END = object()


def _all_have(have: bool, group: Any) -> bool:
    """True when every rank of ``group`` has a batch (one all-reduce of a 0/1 flag)."""
    import torch
    import torch.distributed as dist

    flag = torch.tensor([1 if have else 0], dtype=torch.int64)
    dist.all_reduce(flag, op=dist.ReduceOp.MIN, group=None if group is True else group)
    return bool(flag.item())


def _check_sync(sync_epoch_end: object) -> None:
    """``sync_epoch_end`` must be a bool, ``None`` or a ``torch.distributed`` process group."""
    if sync_epoch_end is None or isinstance(sync_epoch_end, bool):
        return
    import torch.distributed as dist

    group = getattr(dist, "ProcessGroup", None)
    if group is None or not isinstance(sync_epoch_end, group):
        raise TypeError(
            "sync_epoch_end must be True, False, None or a torch.distributed process group, got "
            f"{sync_epoch_end!r}"
        )


class _CommitIterator:
    """Wraps torch's iterator; commits each batch's checkpoint when the batch is returned."""

    def __init__(
        self,
        inner: Any,
        link: LoaderLink,
        token: int,
        num_workers: int,
        sync: Any = None,
        length: Callable[[], int] | None = None,
    ) -> None:
        self._inner = inner
        self._length = length
        self._link = link
        self._token: int | None = token
        self._num_workers = num_workers
        self._sync = sync
        self._done = False

    def __iter__(self) -> _CommitIterator:
        return self

    def __len__(self) -> int:
        if self._length is None:
            raise TypeError("this StreamingDataLoader iterator has no length")
        return self._length()

    def __next__(self) -> Any:
        if self._done:
            raise StopIteration
        try:
            batch = next(self._inner)
        except StopIteration:
            batch = _END
        except BaseException as exc:
            self._link.invalidate(f"a batch failed before it reached the trainer ({exc!r})")
            self._finish()
            raise
        if self._sync is not None and not _all_have(batch is not _END, self._sync):
            batch = _END  # another rank ran dry: this batch is neither returned nor committed
        if batch is _END:
            self._finish()
            raise StopIteration
        try:
            if not isinstance(batch, _Delivered):
                raise RuntimeError("StreamingDataLoader received a batch without its checkpoint")
            self._link.commit(batch.state, batch.worker, self._num_workers)
        except BaseException as exc:
            self._link.invalidate(f"a batch's checkpoint could not be committed ({exc!r})")
            self._finish()
            raise
        return batch.data

    def _finish(self) -> None:
        self._done = True
        token, self._token = self._token, None
        if token is None:
            return
        shutdown = getattr(self._inner, "_shutdown_workers", None)
        try:
            if shutdown is not None:
                shutdown()
            else:
                fetcher = getattr(self._inner, "_dataset_fetcher", None)
                close = getattr(getattr(fetcher, "dataset_iter", None), "close", None)
                if close is not None:
                    close()
        finally:
            self._link.workers_done()
            self._link.close()
            self._link.release(token)

    def close(self) -> None:
        """Stop the workers and release the dataset (also done at exhaustion and on garbage collection)."""
        self._finish()

    def __del__(self) -> None:
        with contextlib.suppress(BaseException):
            self._finish()


@public
class StreamingDataLoader(DataLoader[Any]):
    """A ``torch.utils.data.DataLoader`` whose dataset checkpoints count only delivered batches.

    Workers prefetch; this loader carries each worker's checkpoint with its batch
    and applies it to the parent :class:`StreamingDataset` when ``next()``
    returns the batch, so ``dataset.state_dict()`` always describes exactly what
    the trainer received. Batches are the same as a plain ``DataLoader``'s.

    Differences from ``DataLoader``: ``dataset`` must be a
    :class:`StreamingDataset`; ``in_order`` must stay ``True`` and
    ``persistent_workers`` ``False`` (worker copies could not be reset from a
    loaded checkpoint); ``drop_last`` is refused (dropped tails would depend on
    the worker count). With ``num_workers > 0`` and no
    ``multiprocessing_context``, workers start from a fork server that preloads
    torch, NumPy and pyarrow but never LanceDB or lance (``"spawn"``
    where fork servers do not exist): plain fork is unsafe once LanceDB's
    runtime threads run in the parent. ``state_dict()`` answers after any delivered
    batch; a loader resumed on the same ``world_size`` and ``num_workers`` continues the
    round robin of workers where it stood, so the batch sequence goes on unchanged.

    ``sync_epoch_end`` (``False``, ``True`` for the default process group, or a
    ``torch.distributed`` process group) makes every rank stop at the same global
    step: before returning a batch, ranks all-reduce whether each has one, and if
    any rank ran dry (rows skipped by ``on_transform_error`` can end a rank's
    epoch early) all ranks stop; the batches they held back are not committed, so
    checkpoints stay exact. Every rank must then call ``next`` equally often.

    Raises:
        TypeError: ``dataset`` is not a ``StreamingDataset`` (or overrides ``__iter__``), or
            ``sync_epoch_end`` is neither a bool, ``None`` nor a process group.
        ValueError: an unsupported option is set.
    """

    def __init__(
        self, dataset: StreamingDataset, *args: Any, sync_epoch_end: Any = False, **kwargs: Any
    ) -> None:
        if not isinstance(dataset, StreamingDataset):
            raise TypeError(f"StreamingDataLoader needs a StreamingDataset, got {type(dataset).__name__}")
        if type(dataset).__iter__ is not StreamingDataset.__iter__:
            raise TypeError(
                "StreamingDataLoader does not support StreamingDataset subclasses overriding __iter__"
            )
        if "in_order" in kwargs and kwargs["in_order"] is not True:
            raise ValueError("StreamingDataLoader needs in_order=True: checkpoints commit in delivery order")
        if kwargs.get("persistent_workers", False):
            raise ValueError(
                "StreamingDataLoader does not support persistent_workers=True: worker copies could not be "
                "reset from a loaded checkpoint"
            )
        given = dict(zip(_POSITIONAL, args))
        workers = int(given.get("num_workers", kwargs.get("num_workers", 0)) or 0)
        if (
            workers > 0
            and "multiprocessing_context" not in given
            and kwargs.get("multiprocessing_context") is None
        ):
            kwargs["multiprocessing_context"] = default_context()
        self._streaming_dataset = dataset
        _check_sync(sync_epoch_end)
        self._sync = None if sync_epoch_end is False or sync_epoch_end is None else sync_epoch_end
        adapter = _Adapter(dataset)
        super().__init__(adapter, *args, **kwargs)
        if self.drop_last:
            raise ValueError(
                "StreamingDataLoader does not support drop_last=True: the dropped tails would depend on the "
                "number of workers"
            )
        self._link = adapter.link
        self.collate_fn = _CommitCollate(self.collate_fn, adapter)

    @property
    def streaming_dataset(self) -> StreamingDataset:
        """The dataset whose checkpoints this loader commits."""
        return self._streaming_dataset

    def __iter__(self) -> _CommitIterator:  # type: ignore[override]
        link, workers = self._link, self.num_workers
        link.check_workers(workers)
        token = link.acquire()
        try:
            link.open(workers, 1 if self.batch_size is None else self.batch_size)
            inner = super().__iter__()
        except BaseException:
            link.close()
            link.release(token)
            raise
        sync, length = self._sync, self.__len__
        return _CommitIterator(inner, link, token, workers, sync=sync, length=length)
