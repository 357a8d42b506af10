"""The main-module guard check: workers that start with spawn or a fork server re-run the script.

Rules:
* With the ``spawn`` and ``forkserver`` start methods every worker process imports the main
  script again (as ``__mp_main__``). Top-level code that starts the workers is then run by each
  worker too, and the worker dies while it bootstraps ("DataLoader worker exited unexpectedly").
* :func:`check_main_guard` finds whether a loader is being iterated by top-level code of the main
  script that such a re-import would run: a frame of the call stack runs the main module's
  top level on a line outside every ``if __name__ == "__main__":`` block. It then raises
  ``RuntimeError`` before any worker starts, and says how to fix the script.
* It says nothing when it cannot tell (no script file, an interactive session, source it cannot
  parse), and never under ``fork`` (the child does not re-import).
"""

from __future__ import annotations

import ast
import functools
import sys
from types import FrameType


def _is_main_test(node: ast.expr) -> bool:
    """``__name__ == "__main__"`` (either side)."""
    if not isinstance(node, ast.Compare) or len(node.ops) != 1 or not isinstance(node.ops[0], ast.Eq):
        return False
    sides = [node.left, node.comparators[0]]
    names = [s for s in sides if isinstance(s, ast.Name) and s.id == "__name__"]
    consts = [s for s in sides if isinstance(s, ast.Constant) and s.value == "__main__"]
    return len(names) == 1 and len(consts) == 1


@functools.lru_cache(maxsize=8)
def _guarded_lines(path: str, mtime: float) -> tuple[tuple[int, int], ...] | None:
    """Line ranges of the ``if __name__ == "__main__":`` blocks of ``path`` (``None``: unreadable)."""
    del mtime  # part of the cache key only
    try:
        with open(path, encoding="utf-8") as handle:
            tree = ast.parse(handle.read(), path)
    except (OSError, SyntaxError, ValueError):
        return None
    ranges = []
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _is_main_test(node.test):
            ranges.append((node.lineno, node.end_lineno or node.lineno))
    return tuple(ranges)


def _main_top_frame(frame: FrameType | None, main_file: str) -> FrameType | None:
    """The frame running the main script's top level, if the call stack has one."""
    while frame is not None:
        code = frame.f_code
        if code.co_name == "<module>" and frame.f_globals.get("__name__") == "__main__":
            return frame if code.co_filename == main_file else None
        frame = frame.f_back
    return None


def check_main_guard(start_method: str | None) -> None:
    """Raise ``RuntimeError`` when workers started with ``start_method`` would re-run this call."""
    if start_method not in ("spawn", "forkserver"):
        return
    main = sys.modules.get("__main__")
    main_file = getattr(main, "__file__", None)
    if not isinstance(main_file, str) or not main_file.endswith(".py"):
        return
    frame = _main_top_frame(sys._getframe(1), main_file)
    if frame is None:
        return
    import os

    try:
        mtime = os.stat(main_file).st_mtime
    except OSError:
        return
    ranges = _guarded_lines(main_file, mtime)
    if ranges is None or any(lo <= frame.f_lineno <= hi for lo, hi in ranges):
        return
    raise RuntimeError(
        f"{main_file} line {frame.f_lineno} iterates a StreamingDataLoader with worker processes at the "
        f'top level of the script, outside an `if __name__ == "__main__":` block. Workers start with '
        f"{start_method!r} (fork is unsafe with LanceDB), which imports the script again in every worker, "
        'so each worker would run this line too and die while starting ("DataLoader worker exited '
        'unexpectedly"). Put the training code under `if __name__ == "__main__":` (or in a function '
        "called from there)."
    )
