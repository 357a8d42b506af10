"""``python -m elastic_loader.testing.vectors``: generate or check the vector files (see :mod:`.io`)."""

from __future__ import annotations

from .io import main

if __name__ == "__main__":
    raise SystemExit(main())
