"""Every vector family, one module each, in the order ``spec/VECTORS.md`` documents them.

Rules of this package: a family module defines ``FAMILY`` (its name, summary,
cases and replay) and nothing that another family needs, except the shared
checkpoints of :mod:`.fixtures` and the sessions of :mod:`.sessions`; adding a
family means adding its module here.
"""

from __future__ import annotations

from ..plumbing import Family
from . import (
    auto_budget,
    checkpoint_snapshot,
    commit,
    load,
    loader,
    merge,
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
    )
}
"""Every vector family, in the order they are documented."""

__all__ = ["FAMILIES"]
