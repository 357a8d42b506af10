"""The optimized pipeline (private). Import the public names from :mod:`elastic_loader`.

The pipeline implements the executable spec (:mod:`elastic_loader.spec`) without
importing it (tests/meta/test_layering.py checks this). Where a spec module decides
something, the pipeline module below decides the same thing:

=====================  ==============================================================
spec module            pipeline module
=====================  ==============================================================
``topology``           ``_topology`` (rank block, worker sub-block, the worker check);
                       ``_lance`` (the permutation, ``SplitRows``); ``_epoch``
``rows``               ``_rows`` (catch-up, cycles, ``RowCursor``); ``_faults``
                       (``on_transform_error``: what is dropped, row isolation)
``packing``            ``_packing`` (streams, blocks, ``doc_ids``, ``PackCursor``,
                       the ``"auto"`` budget)
``checkpoint``         ``_checkpoint`` (snapshot, parse, merge, commit; ``RowState``,
                       ``PackedState``); ``_gate`` (``CheckpointGate``, ``gate_*``)
``loader``             ``loader`` (``StreamingDataLoader``); ``_gate.check_loader_start``
``params``             ``_validate`` (same checks, same order); ``_settings``
``errors``             the messages of each module (same exception classes)
``computed``           ``_computed`` (the computed permutation); ``_positions``
                       (``permutation=``, ``PositionPerm``)
``local``              ``_local`` (the local permutation); ``_positions``
=====================  ==============================================================

Pipeline-only parts, with no spec counterpart: ``_fetch`` (units, threads,
backpressure), ``_demand`` (read-ahead), ``_session`` (one iteration, the lease),
``_rowfile`` (row ids for worker processes), ``_stats`` (counters),
``_native`` (packing's optional compiled steps: the document copy ``_documents``
calls and the ``doc_ids`` ``_packing`` writes) and
``dataset`` (the ``StreamingDataset`` facade and ``LoaderLink``).
docs/ARCHITECTURE.md describes each part and the path of a row and of a block.

Rules: a module imports only modules below it (``dataset`` and ``loader`` at
the top, ``_stats`` and ``_lance`` at the bottom); no module reads another's
private names; policies (read-ahead, error handling) are objects or functions
passed down, never callbacks into a higher module.
"""
