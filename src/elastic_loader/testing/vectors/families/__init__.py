"""Every vector family, one module each, in the order ``spec/VECTORS.md`` documents them.

Rules of this package: a family module defines ``FAMILY`` (its name, summary,
cases and replay) and nothing that another family needs, except the shared
checkpoints of :mod:`.fixtures` and the sessions of :mod:`.sessions`; adding a
family means adding its module here.

Rules of every family module (its own docstring says only what is its own: the
model it asks, where its cases come from, the invariants they are checked against):

* The input is a frozen dataclass with a JSON codec (``_encode``/``_decode``;
  :func:`~elastic_loader.testing.vectors.codec.record` makes them field by field
  wherever every field has a JSON form of its own) and a model run (``_run``)
  that checks the invariants of the result and returns the output, or
  :func:`~elastic_loader.testing.vectors.codec.error_json` of the
  :class:`~elastic_loader.spec.errors.SpecError` the model raised
  (:func:`~elastic_loader.testing.vectors.plumbing.attempt`).
* :func:`cases` builds the cases, deterministically, in the order the vector
  file lists them; the first line of its docstring is the family's summary in
  that file.
* The names every family uses (the case and codec types, ``attempt``,
  ``error_json``, ``SpecError``, the invariants module) come from :mod:`.base`,
  in one import.
"""

from __future__ import annotations

from ..plumbing import Family
from . import (
    auto_budget,
    checkpoint_snapshot,
    commit,
    computed_order,
    load,
    loader,
    merge,
    mixture,
    packing,
    params,
    protocols,
    rank_checkpoint,
    resolve,
    row_order,
    schedule,
    table_pin,
    topology,
)

FAMILIES: dict[str, Family] = {
    module.FAMILY.name: module.FAMILY
    for module in (
        topology,
        row_order,
        packing,
        checkpoint_snapshot,
        load,
        merge,
        commit,
        params,
        auto_budget,
        loader,
        schedule,
        rank_checkpoint,
        resolve,
        table_pin,
        protocols,
        mixture,
        computed_order,
    )
}
"""Every vector family, in the order they are documented."""

__all__ = ["FAMILIES"]
