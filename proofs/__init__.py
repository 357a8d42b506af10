"""Machine checks of the named invariants of elastic-loader's executable spec.

Written proofs live next to this package as ``proofs/<InvariantName>.md``.
The machine checks are of two kinds (see ``proofs/README.md``): SMT lemmas
over unbounded integers (:mod:`proofs.smt`) and bounded exhaustive checks of
the model itself (``proofs.bounded_*``). :data:`proofs.registry.REGISTRY`
maps every name of ``INVARIANT_NAMES`` to its checks; ``python -m proofs``
runs them.
"""
