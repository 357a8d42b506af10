"""The shipped conformance suite: Hypothesis strategies, state machines, vectors and runner.

Other implementations of the ``lancedb.streaming`` API check themselves against the
executable spec (:mod:`elastic_loader.spec`) through this package; elastic-loader's
own tests use exactly the same entry points.
"""
