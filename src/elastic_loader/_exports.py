"""Public names of a package, loaded on first use, and their public ``__module__``.

Rules:
* A package lists each public name once, in an ``_EXPORTS`` dict mapping the
  name to the (relative) module that defines it, and hands it to
  :func:`lazy_exports`, which gives the package's module ``__getattr__`` and
  ``__dir__``. A name's module is imported the first time the name is read,
  so importing ``elastic_loader`` (or ``elastic_loader.spec``) loads neither
  torch nor LanceDB, and ``elastic_loader.testing`` loads neither Hypothesis.
* A class or function defined in a private module but public in
  ``elastic_loader`` is decorated with :func:`public`, so its ``__module__``
  (what ``repr``, ``help`` and pickle show) is ``elastic_loader``, however it
  was imported. Pickles then name ``elastic_loader.StreamingDataset``, which
  the lazy ``__getattr__`` resolves.
* Type checkers cannot follow the lazy loading, so each package also imports
  its names under ``TYPE_CHECKING``; tests/meta/test_exports.py keeps that listing
  equal to ``_EXPORTS``.

This module imports only the standard library.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from importlib import import_module
from typing import Any, TypeVar

PUBLIC_MODULE = "elastic_loader"

T = TypeVar("T")


def lazy_exports(
    package: str, exports: Mapping[str, str], public: Iterable[str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package``, whose names ``exports`` come from modules.

    Args:
        package: the package's ``__name__``.
        exports: public name -> module that defines it, relative to ``package``.
        public: every public name (the package's ``__all__``), for ``dir()``.
    """
    names = list(public)

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(module, package), name)
        vars(import_module(package))[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(import_module(package))) | set(names))

    return __getattr__, __dir__


def public(obj: T) -> T:
    """Give ``obj`` (a class or function exported by ``elastic_loader``) its public ``__module__``.

    The functions a class defines (its methods) get it too, as in trio's
    ``fixup_module_metadata``.
    """
    private = getattr(obj, "__module__", "")
    obj.__module__ = PUBLIC_MODULE
    if isinstance(obj, type):
        for member in vars(obj).values():
            function = getattr(member, "__func__", member)
            if callable(function) and getattr(function, "__module__", None) == private:
                function.__module__ = PUBLIC_MODULE
    return obj
