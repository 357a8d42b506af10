"""How the conformance machines reach an implementation under test.

An implementation is anything with the ``lancedb.streaming`` API. The machines
use only what :class:`Implementation` lists: build a dataset from a table and
constructor keywords, build a ``StreamingDataLoader`` over a dataset, merge
checkpoints, and (optionally) move a dataset to another epoch. Datasets are
used only through :class:`DatasetLike`. :func:`implementation_from_module`
adapts any module exposing ``StreamingDataset``, ``StreamingDataLoader`` and
``merge_state_dicts`` (a module function or a static method of the dataset).

Capabilities: a machine draws an option or runs at all only where the
implementation has it, and the conformance report says which names were not
applicable instead of passing them vacuously. :func:`accepts` reads a keyword of
``StreamingDataset``; :func:`mixture_api` reads whether the module has mixtures
(``StreamingMixture`` and ``MixtureSource``; ``lancedb.streaming`` has none).
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

State = dict[str, object]
"""A checkpoint as ``state_dict()`` returns it."""


@runtime_checkable
class DatasetLike(Protocol):
    """The part of ``StreamingDataset`` the machines drive."""

    def __iter__(self) -> Iterator[object]:
        """Yield rows (row mode) or ``{"input_ids", "doc_ids"}`` blocks (packing)."""
        ...

    def state_dict(self) -> State:
        """The checkpoint of the dataset's progress."""
        ...

    def load_state_dict(self, state: Mapping[str, object]) -> None:
        """Resume from a checkpoint."""
        ...


class Implementation(Protocol):
    """An implementation under test, as the machines see it.

    ``dataset(table, **params)`` receives ``StreamingDataset`` keywords only.
    ``loader(dataset, **kwargs)`` receives ``torch.utils.data.DataLoader``
    keywords (``batch_size``, ``num_workers``, ``multiprocessing_context``).
    ``set_epoch`` returns False when the implementation has no ``set_epoch``;
    the machines then build fresh datasets for a new epoch instead.
    """

    @property
    def name(self) -> str:
        """A label for reports (for modules, the module name)."""
        ...

    def dataset(self, table: object, **params: object) -> DatasetLike:
        """Build a ``StreamingDataset``."""
        ...

    def loader(self, dataset: DatasetLike, **kwargs: object) -> Iterable[object]:
        """Build a ``StreamingDataLoader`` over ``dataset``."""
        ...

    def merge_state_dicts(self, states: Sequence[Mapping[str, object]]) -> State:
        """Merge per-rank checkpoints."""
        ...

    def set_epoch(self, dataset: DatasetLike, epoch: int) -> bool:
        """Move ``dataset`` to ``epoch`` if the implementation can; report whether it did."""
        ...


@dataclass(frozen=True)
class ModuleImplementation:
    """An :class:`Implementation` built from the three public names of a module."""

    name: str
    dataset_class: Callable[..., DatasetLike]
    loader_class: Callable[..., Iterable[object]]
    merge: Callable[[list[Mapping[str, object]]], State]
    mixture_class: Callable[..., DatasetLike] | None = None
    """The module's ``StreamingMixture``, if it has one."""
    source_class: Callable[..., object] | None = None
    """The module's ``MixtureSource``, if it has one."""

    def dataset(self, table: object, **params: object) -> DatasetLike:
        """``StreamingDataset(table, **params)``."""
        return self.dataset_class(table, **params)

    def loader(self, dataset: DatasetLike, **kwargs: object) -> Iterable[object]:
        """``StreamingDataLoader(dataset, **kwargs)``."""
        return self.loader_class(dataset, **kwargs)

    def merge_state_dicts(self, states: Sequence[Mapping[str, object]]) -> State:
        """``merge_state_dicts(list(states))``."""
        return self.merge(list(states))

    def set_epoch(self, dataset: DatasetLike, epoch: int) -> bool:
        """Call ``dataset.set_epoch(epoch)`` when the dataset has it."""
        method = getattr(dataset, "set_epoch", None)
        if method is None:
            return False
        method(epoch)
        return True


def accepts(implementation: Implementation, keyword: str) -> bool:
    """Whether the implementation's ``StreamingDataset`` takes ``keyword`` (a module's, by its
    signature; any other implementation: no), so machines draw options only where they exist."""
    dataset_class = getattr(implementation, "dataset_class", None)
    if dataset_class is None:
        return False
    try:
        return keyword in inspect.signature(dataset_class).parameters
    except (TypeError, ValueError):
        return False


@dataclass(frozen=True)
class MixtureApi:
    """The mixture classes of an implementation: ``source(table, **options)`` describes one source,
    ``mixture(sources, weights, **params)`` builds the mixture (a dataset with ``schedule()`` and
    ``merge_state_dicts``)."""

    source: Callable[..., object]
    mixture: Callable[..., DatasetLike]


def mixture_api(implementation: Implementation) -> MixtureApi | None:
    """The implementation's mixture classes, or ``None`` when it has no mixtures (then the mixture
    machine does not apply to it)."""
    mixture = getattr(implementation, "mixture_class", None)
    source = getattr(implementation, "source_class", None)
    if mixture is None or source is None:
        return None
    return MixtureApi(source, mixture)


def implementation_from_module(name: str) -> ModuleImplementation:
    """Adapt the module ``name`` (for example ``"lancedb.streaming"`` or ``"elastic_loader"``).

    Raises:
        ImportError: the module cannot be imported.
        AttributeError: it lacks ``StreamingDataset``, ``StreamingDataLoader``
            or a ``merge_state_dicts`` (module level or on ``StreamingDataset``).
    """
    module = importlib.import_module(name)
    dataset_class = module.StreamingDataset
    loader_class = module.StreamingDataLoader
    merge = getattr(module, "merge_state_dicts", None) or getattr(dataset_class, "merge_state_dicts", None)
    if merge is None:
        raise AttributeError(f"{name} has no merge_state_dicts")
    return ModuleImplementation(
        name,
        dataset_class,
        loader_class,
        merge,
        getattr(module, "StreamingMixture", None),
        getattr(module, "MixtureSource", None),
    )
