"""StreamingDataLoader: a torch DataLoader whose checkpoints count only delivered batches.

Rules:
* Every batch a worker produces carries the worker's checkpoint right after
  the batch's last item; the parent commits it into its dataset when the batch
  is returned by next(), never earlier. A failed batch disables checkpoints
  until a checkpoint is loaded. Workers start with a start method that is safe
  with LanceDB (not fork) unless the caller chooses one, and the loader refuses
  to start them from top-level code of a script without a main guard (``_guard``).
* One live iterator per loader: ``iter(loader)`` and ``set_epoch`` close the
  loader's previous iterator first (its later ``next`` raises). An epoch is
  *finished* when the loader's iterator ran out, or when this loader iterated the
  epoch and the delivered progress leaves no batch for any worker; iterating a
  finished epoch starts the next one (``epoch + 1``), so a second ``for batch in
  loader`` is never silently empty. A new loader over a dataset consumed
  elsewhere continues it (nothing left: no batches), as the reference does.
* ``state_dict()`` is one opaque entry (``_loaderstate``): the dataset's state
  plus whether the epoch is finished. It never waits for other ranks.
  ``load_state_dict`` first moves the dataset to the state's epoch (frameworks
  rebuild loaders at epoch 0), and puts it back if the dataset refuses the state.
* ``len(loader)`` is the number of batches of a whole epoch: each worker batches
  its own splits, so it is ``num_workers`` times one worker's batch count
  (``drop_last``: each worker drops its own short last batch).
* ``batch_format`` (columnar or packed batches, ``_columnar``): torch is told not to batch, and
  every item the dataset yields is a whole batch of ``batch_size`` rows or blocks of one iterator,
  so commits, the ledger's batch size, ``len`` and ``drop_last`` are those of torch's batching.
* ``persistent_workers=True``: the workers' copies are re-seeded from the parent
  at every iteration (``_reseed``).
* Only a StreamingDataLoader iterates its adapter: a DataLoader another library
  rebuilt from ``loader.dataset`` is refused (its batches would carry
  checkpoints nobody commits). ``accelerate``'s ``prepare`` returns the loader
  unchanged (it already splits the data by rank).

The loader reaches its dataset only through ``dataset.LoaderLink``. The collate
finds the dataset whose checkpoint goes with a batch through torch's worker
info in a worker process, through the adapter it holds in the main process.
"""

from __future__ import annotations

import contextlib
import logging
import math
import multiprocessing
import multiprocessing.context
import weakref
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from .._exports import public
from . import _columnar, _loaderstate, _reseed
from ._guard import check_main_guard
from .dataset import LoaderLink, StreamingDataset
from .mixture import MixtureLink, StreamingMixture

logger = logging.getLogger("elastic_loader")

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
    state: object
    """The batch's checkpoint (a dataset's ``BatchSnapshot``, a mixture's dict)."""
    worker: int | None
    """The torch worker that produced the batch (``None``: the main process)."""


def _link_for(dataset: Any) -> Any:
    """The narrow interface of a dataset or a mixture (``dataset.LoaderLink``, ``mixture.MixtureLink``)."""
    return MixtureLink(dataset) if isinstance(dataset, StreamingMixture) else LoaderLink(dataset)


class _Adapter(IterableDataset[Any]):
    """What torch iterates: the dataset's items, with the consumer-commit transport on.

    ``active`` is set while its StreamingDataLoader starts or runs an iteration (worker copies
    are pickled then, so they carry it); ``reseed`` names the directory of a persistent-worker
    loader's snapshots, ``iterations`` counts this copy's iterations.
    """

    def __init__(self, dataset: StreamingDataset | StreamingMixture) -> None:
        super().__init__()
        self.dataset = dataset
        self.link = _link_for(dataset)
        self.active = False
        self.reseed: str | None = None
        self.iterations = 0
        self.columnar: _columnar.Columnar | None = None

    def __iter__(self) -> Iterator[Any]:
        if not self.active:
            raise RuntimeError(
                "a StreamingDataLoader's dataset is being iterated by another DataLoader (a library "
                "rebuilt the loader from loader.dataset, e.g. accelerate's skip_first_batches): its batches "
                "would carry checkpoints that nobody commits. Iterate the StreamingDataLoader itself; to "
                "resume, load its state_dict() instead of skipping batches"
            )
        self.iterations += 1
        return self._items(self.iterations)

    def _items(self, iteration: int) -> Iterator[Any]:
        """The items of iteration ``iteration`` of this copy; a persistent worker first loads the
        parent's snapshot (here, inside the generator, so a failure reaches the trainer)."""
        if self.reseed is not None and iteration > 1 and get_worker_info() is not None:
            fresh = _reseed.load(self.reseed, iteration)
            link = _link_for(fresh)
            link.keep_shared(self.link)
            self.dataset, self.link = fresh, link
        yield from self.link.items(self.columnar)

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


def _as_is(batch: Any) -> Any:
    """The collate of a columnar loader without a ``collate_fn``: the batch as the dataset made it."""
    return batch


def _columnar_options(
    dataset: StreamingDataset, batch_format: object, given: dict[str, Any], kwargs: dict[str, Any]
) -> tuple[tuple[Any, ...], dict[str, Any], _columnar.Columnar]:
    """A columnar loader's DataLoader arguments (torch does not batch: each item is a batch) and
    its mode; ``ValueError``/``TypeError`` for options that do not fit (``_columnar.check``)."""
    options = {**given, **kwargs}
    size = options.get("batch_size", 1)
    link = LoaderLink(dataset)
    _columnar.check(batch_format, size, link.yields())
    assert isinstance(batch_format, str) and isinstance(size, int)
    _columnar.check_types(batch_format, {} if link.yields() == "pack_sequences" else link.read_types())
    mode = _columnar.Columnar(size, batch_format, bool(options.get("drop_last", False)))
    collate = options.get("collate_fn")
    options.update(batch_size=None, drop_last=False, collate_fn=_as_is if collate is None else collate)
    return (), options, mode


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


def _shut_down(shutdown: Callable[[], None]) -> None:
    """Stop torch's workers. A worker that dies abnormally while it is being stopped (a native
    library aborting at process exit) is logged, not raised: what it held was never delivered,
    so the committed progress is exact and the next iteration reads it again."""
    try:
        shutdown()
    except RuntimeError as exc:
        if "DataLoader worker" not in str(exc):
            raise
        logger.warning("a DataLoader worker died while it was being shut down: %s", exc)


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
        on_end: Callable[[bool], None] | None = None,
        persistent: bool = False,
    ) -> None:
        self._inner = inner
        self._length = length
        self._link = link
        self._token: int | None = token
        self._num_workers = num_workers
        self._sync = sync
        self._done = False
        self._on_end = on_end
        self._persistent = persistent
        self._superseded = False

    def __iter__(self) -> _CommitIterator:
        return self

    def __len__(self) -> int:
        if self._length is None:
            raise TypeError("this StreamingDataLoader iterator has no length")
        return self._length()

    def __next__(self) -> Any:
        if self._superseded:
            raise RuntimeError(
                "this StreamingDataLoader iterator was closed by a newer iter(loader), set_epoch or "
                "load_state_dict on its loader (one live iterator per loader)"
            )
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
            self._finish(exhausted=True)
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

    def _finish(self, exhausted: bool = False) -> None:
        self._done = True
        token, self._token = self._token, None
        if token is None:
            return
        if self._on_end is not None:
            self._on_end(exhausted)
        shutdown = None if self._persistent else getattr(self._inner, "_shutdown_workers", None)
        try:
            if shutdown is not None:
                _shut_down(shutdown)
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

    def supersede(self) -> None:
        """Its loader starts another iteration (or epoch, or loads a state): release the dataset
        (persistent workers stay up: torch resets them for the next iteration)."""
        self._superseded = not self._done
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

    ``state_dict()`` / ``load_state_dict()`` (the ``Stateful`` protocol of
    torchdata, ``torch.distributed.checkpoint``, Lightning and accelerate) hold
    the dataset's state and whether the epoch is finished, as one opaque entry
    that any one rank may save. Iterating the loader again after a finished
    epoch starts the next epoch; ``set_epoch`` chooses one.

    Differences from ``DataLoader``: ``dataset`` must be a
    :class:`StreamingDataset`; ``in_order`` must stay ``True``; ``len(loader)``
    counts the batches each worker really makes; ``drop_last=True`` drops each
    worker's own short last batch (its rows are not delivered that epoch, so
    which rows depends on ``num_workers``). With ``num_workers > 0`` and no
    ``multiprocessing_context``, workers start from a fork server that preloads
    torch, NumPy and pyarrow but never LanceDB or lance (``"spawn"``
    where fork servers do not exist): plain fork is unsafe once LanceDB's
    runtime threads run in the parent. ``state_dict()`` answers after any delivered
    batch; a loader resumed on the same ``world_size`` and ``num_workers`` continues the
    round robin of workers where it stood, so the batch sequence goes on unchanged.

    ``batch_format`` (``"arrow"``, ``"numpy"`` or ``"torch"``; default ``None``: rows) makes each
    batch one ``pyarrow.RecordBatch`` or dict of arrays or tensors, with no Python object per row:
    the same rows per batch and the same checkpoints as row mode (``_columnar``; docs/PIPELINE.md).
    ``loader.batch_size`` is then ``None`` (torch does not batch); ``collate_fn`` receives each
    columnar batch. Over a packed dataset, ``"torch"`` or ``"numpy"`` makes each batch
    ``{"input_ids", "doc_ids"}`` of shape ``(batch_size, pack_sequences)``, built without a Python
    object per block: the default collate's values and checkpoints.

    ``sync_epoch_end`` (``False``, ``True`` for the default process group, or a
    ``torch.distributed`` process group) makes every rank stop at the same global
    step: before returning a batch, ranks all-reduce whether each has one, and if
    any rank ran dry (rows skipped by ``on_transform_error`` can end a rank's
    epoch early) all ranks stop; the batches they held back are not committed, so
    checkpoints stay exact. Every rank must then call ``next`` equally often.

    Raises:
        TypeError: ``dataset`` is not a ``StreamingDataset`` (or overrides ``__iter__``),
            ``sync_epoch_end`` is neither a bool, ``None`` nor a process group, or ``batch_format``
            is not a str (``batch_size`` not an int with it).
        ValueError: an unsupported option is set, or ``batch_format`` is unknown, lacks a
            ``batch_size >= 1``, or meets a ``transform`` (``"arrow"``: or ``pack_sequences``).
    """

    _is_accelerate_prepared = True
    """accelerate's ``prepare`` returns this loader as it is: it already reads this rank's splits
    only, and accelerate's rebuilt loader would lose the checkpoints (see docs/INTEGRATIONS.md)."""

    def __init__(
        self,
        dataset: StreamingDataset,
        *args: Any,
        sync_epoch_end: Any = False,
        batch_format: str | None = None,
        **kwargs: Any,
    ) -> None:
        if not isinstance(dataset, (StreamingDataset, StreamingMixture)):
            raise TypeError(
                "StreamingDataLoader requires a StreamingDataset or StreamingMixture, got "
                f"{type(dataset).__name__}"
            )
        if isinstance(dataset, StreamingDataset) and type(dataset).__iter__ is not StreamingDataset.__iter__:
            raise TypeError(
                "StreamingDataLoader does not support StreamingDataset subclasses that override __iter__: "
                "they cannot provide exact per-batch checkpoints"
            )
        if "in_order" in kwargs and kwargs["in_order"] is not True:
            raise ValueError("StreamingDataLoader needs in_order=True: checkpoints commit in delivery order")
        given = dict(zip(_POSITIONAL, args))
        workers = int(given.get("num_workers", kwargs.get("num_workers", 0)) or 0)
        if (
            workers > 0
            and "multiprocessing_context" not in given
            and kwargs.get("multiprocessing_context") is None
        ):
            kwargs["multiprocessing_context"] = default_context()
        self._streaming_dataset = dataset
        columnar = None
        if batch_format is not None and isinstance(dataset, StreamingMixture):
            raise ValueError(
                "batch_format is not supported for a StreamingMixture (its items come from several "
                "tables); iterate rows, or use one StreamingDataset per source"
            )
        if batch_format is not None:
            args, kwargs, columnar = _columnar_options(dataset, batch_format, given, kwargs)
        _check_sync(sync_epoch_end)
        self._sync = None if sync_epoch_end is False or sync_epoch_end is None else sync_epoch_end
        adapter = _Adapter(dataset)
        adapter.columnar = self._columnar = columnar
        super().__init__(adapter, *args, **kwargs)
        self._adapter = adapter
        self._link = adapter.link
        self.collate_fn = _CommitCollate(self.collate_fn, adapter)
        self._live: weakref.ref[_CommitIterator] | None = None
        self._finished_at: int | None = None  # the dataset generation whose epoch ran out here
        self._iterated_at: int | None = None  # the dataset generation this loader last iterated
        self._reseed: _reseed.Reseed | None = None
        if self.persistent_workers and self.num_workers > 0:
            self._reseed = _reseed.Reseed()
            adapter.reseed = self._reseed.directory

    @property
    def streaming_dataset(self) -> StreamingDataset:
        """The dataset whose checkpoints this loader commits."""
        return self._streaming_dataset

    # ------------------------------------------------------------ epochs

    def _close_live(self) -> None:
        """Close this loader's previous iterator, if it is still open."""
        live = None if self._live is None else self._live()
        self._live = None
        if live is not None:
            live.supersede()

    def epoch_finished(self) -> bool:
        """Whether the dataset's current epoch is fully delivered by this loader: its iterator ran
        out, or it iterated this epoch and no worker has a batch left (the next iteration then
        starts the next epoch). A dataset consumed by another loader or iterator is not finished
        here: a new loader over it continues, and yields nothing (the reference's B11)."""
        generation = self._link.generation()
        if self._finished_at == generation:
            return True
        if self._iterated_at != generation:  # a dataset consumed elsewhere keeps the reference's B11
            return False
        left = self._link.remaining(self.num_workers)
        return sum(self._batches(n) for n in left) == 0

    def _batches(self, items: int) -> int:
        size, drop_last = self._batching()
        if size is None:
            return items
        return items // size if drop_last else math.ceil(items / size)

    def _batching(self) -> tuple[int | None, bool]:
        """Rows per batch (``None``: torch does not batch) and ``drop_last``, in either mode."""
        if self._columnar is not None:
            return self._columnar.batch_size, self._columnar.drop_last
        return self.batch_size, self.drop_last

    def _ended(self, exhausted: bool) -> None:
        if exhausted:
            self._finished_at = self._link.generation()

    def set_epoch(self, epoch: int) -> None:
        """Start epoch ``epoch`` of the dataset (closing this loader's open iterator first).

        Raises:
            TypeError: ``epoch`` is not an int.
            ValueError: ``epoch`` is negative or the seed would overflow.
            RuntimeError: another iterator over the dataset is active.
        """
        self._close_live()
        self._link.set_epoch(epoch)

    def __len__(self) -> int:
        """Batches in a whole epoch: every worker batches its own share of this rank's items."""
        return sum(self._batches(n) for n in self._link.epoch_items(self.num_workers))

    # ------------------------------------------------------------ checkpoints

    def state_dict(self) -> dict[str, Any]:
        """The loader's checkpoint: ``{"elastic_loader": "<JSON>"}``, one opaque entry holding the
        dataset's ``state_dict()`` and whether its epoch is finished.

        Any one rank's entry resumes every rank (the dataset infers the other ranks' progress under
        lockstep), so frameworks that keep one rank's copy, or one value per key, keep a whole
        state. It never communicates with other ranks.

        Raises:
            RuntimeError: the dataset's ``state_dict()`` refuses (a failed batch, or a plain
                ``DataLoader`` with workers iterated the dataset).
        """
        return _loaderstate.encode(self._link.state_dict(), self.epoch_finished())

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume from a ``state_dict()`` of a StreamingDataLoader (or of a StreamingDataset),
        saved on any world size and number of workers, in any epoch (the dataset moves to the
        state's epoch first); closes this loader's open iterator first.

        Raises:
            TypeError: ``state`` is not a dict.
            ValueError: ``state`` is not a loader state of a known format, or the dataset's
                ``load_state_dict`` refuses it.
            RuntimeError: another iterator over the dataset is active.
        """
        dataset_state, finished = _loaderstate.decode(state)
        self._close_live()
        self._adopt_epoch(dataset_state)
        self._finished_at = self._link.generation() if finished else None

    def _adopt_epoch(self, dataset_state: dict[str, object]) -> None:
        """Load ``dataset_state``, first moving the dataset to the state's epoch: the loader owns
        the epochs (frameworks rebuild it at epoch 0 and never call ``set_epoch``). A refused state
        leaves the dataset at its own epoch."""
        epoch, before = dataset_state.get("epoch"), self._streaming_dataset.epoch
        moved = type(epoch) is int and epoch >= 0 and epoch != before
        if moved:
            assert isinstance(epoch, int)
            self._link.set_epoch(epoch)
        try:
            self._link.load_state_dict(dataset_state)
        except BaseException:
            if moved:
                self._link.set_epoch(before)
            raise

    # ------------------------------------------------------------ iteration

    def __iter__(self) -> _CommitIterator:  # type: ignore[override]
        self._close_live()
        link, workers = self._link, self.num_workers
        link.check_workers(workers)
        if workers > 0:
            context = self.multiprocessing_context
            check_main_guard(None if context is None else context.get_start_method())
        if self.epoch_finished():
            logger.info("StreamingDataLoader: epoch %d is finished; starting epoch %d", *self._advance())
        token = link.acquire()
        self._iterated_at = link.generation()
        try:
            link.open(workers, self._batching()[0] or 1)
            if self._reseed is not None:
                self._reseed.next_iteration(self._streaming_dataset)
            self._adapter.active = True
            try:
                inner = super().__iter__()  # in-process: iterates the adapter; workers: pickle it
            finally:
                self._adapter.active = False
        except BaseException:
            link.close()
            link.release(token)
            raise
        it = _CommitIterator(
            inner,
            link,
            token,
            workers,
            sync=self._sync,
            length=self.__len__,
            on_end=self._ended,
            persistent=self._reseed is not None,
        )
        self._live = weakref.ref(it)
        return it

    def _advance(self) -> tuple[int, int]:
        before = self._streaming_dataset.epoch
        return before, self._link.next_epoch()
