"""``python -m proofs``: run every machine check (see :mod:`proofs.cli`)."""

from .cli import main

raise SystemExit(main())
