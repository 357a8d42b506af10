"""The ``elastic-loader`` command.

Usage::

    elastic-loader --version
    elastic-loader conformance --impl MODULE[:FACTORY] [--json PATH] [--examples N] [--steps N]
                               [--seed N] [--no-shrink] [--shrink-seconds S]
                               [--machines row,packed,process] [--no-vectors] [--quiet]

``conformance`` runs the conformance suite
(:func:`elastic_loader.testing.conformance.run_conformance`) against any
importable implementation of the ``lancedb.streaming`` API and prints the
per-invariant table; ``--json PATH`` also writes the report as JSON (``-``:
to standard output, the table then goes to standard error). Progress bars go
to standard error.

Exit status: 0 when every checked invariant and every applicable vector
family passes, 1 when something fails, 2 on a usage error (bad arguments, an
implementation that cannot be imported or adapted, or the ``conformance``
extra missing: then one line says what to install).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from . import __version__
from .testing import defaults

if TYPE_CHECKING:
    from tqdm import tqdm

    from .testing.conformance import ProgressEvent

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
MACHINE_NAMES = defaults.MACHINES


def _machines(text: str) -> tuple[str, ...]:
    names = tuple(part.strip() for part in text.split(",") if part.strip())
    unknown = [n for n in names if n not in MACHINE_NAMES]
    if not names or unknown:
        raise argparse.ArgumentTypeError(
            f"expected a comma-separated subset of {','.join(MACHINE_NAMES)}, got {text!r}"
        )
    return names


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="elastic-loader",
        description="Elastic, resumable streaming data loading for PyTorch over LanceDB tables.",
    )
    parser.add_argument("--version", action="version", version=f"elastic-loader {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    conf = sub.add_parser(
        "conformance",
        help="check an implementation of the lancedb.streaming API against the spec",
        description=(
            "Run the state machines and the applicable vectors of the elastic-loader spec against "
            "an implementation and print, per invariant, whether it holds (with a minimal "
            "counterexample when it does not). Exit status 1 on any failure."
        ),
    )
    conf.add_argument(
        "--impl",
        required=True,
        metavar="MODULE[:FACTORY]",
        help="the implementation: a module with StreamingDataset, StreamingDataLoader and "
        "merge_state_dicts (e.g. lancedb.streaming, elastic_loader), or MODULE:FACTORY naming an "
        "Implementation object or a zero-argument callable returning one",
    )
    conf.add_argument("--json", metavar="PATH", help="also write the report as JSON ('-': standard output)")
    for option in defaults.OPTIONS:
        flag = f"--{option.name}"
        if option.kind == "flag":
            conf.add_argument(flag, action="store_true", help=option.help)
        elif option.kind == "machines":
            conf.add_argument(
                flag, type=_machines, default=MACHINE_NAMES, metavar=option.metavar, help=option.help
            )
        else:
            convert = _positive if option.kind == "count" else int
            conf.add_argument(
                flag, type=convert, default=option.default, metavar=option.metavar, help=option.help
            )
    conf.add_argument(
        "--vectors-dir", metavar="DIR", help="where the JSON vectors are (default: spec/vectors)"
    )
    conf.add_argument(
        "--tables-dir", metavar="DIR", help="where to build the test tables (default: a temp dir)"
    )
    conf.add_argument("--quiet", action="store_true", help="no progress bars")
    return parser


class _Bars:
    """One tqdm bar per (machine, phase), on ``stream``."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.bars: dict[tuple[str, str], tqdm] = {}

    def __call__(self, event: ProgressEvent) -> None:
        from tqdm import tqdm

        key = (event.machine, event.phase)
        bar = self.bars.get(key)
        if bar is None:
            bar = tqdm(
                total=event.total,
                desc=f"{event.machine}: {event.phase}",
                unit=f" {event.unit}",
                file=self.stream,
                leave=True,
                dynamic_ncols=True,
            )
            self.bars[key] = bar
        bar.update(event.done - bar.n)
        if event.finished:
            bar.close()
            del self.bars[key]

    def close(self) -> None:
        for bar in self.bars.values():
            bar.close()
        self.bars.clear()


CONFORMANCE_NEEDS = ("hypothesis", "pytest")
"""What the conformance suite imports beyond the core dependencies (the ``conformance`` extra)."""


def _missing(modules: Sequence[str]) -> list[str]:
    """The modules of ``modules`` that cannot be imported."""
    missing = []
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    return missing


def _conformance(args: argparse.Namespace) -> int:
    missing = _missing(CONFORMANCE_NEEDS)
    if missing:
        print(
            f"elastic-loader conformance needs {', '.join(missing)}: "
            "pip install 'elastic-loader[conformance]'",
            file=sys.stderr,
        )
        return EXIT_USAGE
    # LanceDB's native logger reads this once, when the extension loads: keep its
    # "creating a new dataset" warnings out of the progress bars.
    os.environ.setdefault("LANCEDB_LOG", "error")
    from .testing.conformance import conformance_settings, resolve_implementation, run_conformance

    try:
        implementation = resolve_implementation(args.impl)
    except (ImportError, AttributeError, TypeError) as error:
        print(f"elastic-loader conformance: cannot use --impl {args.impl}: {error}", file=sys.stderr)
        return EXIT_USAGE
    table_stream: TextIO = sys.stderr if args.json == "-" else sys.stdout
    bars = None if args.quiet else _Bars(sys.stderr)
    try:
        report = run_conformance(
            implementation,
            settings=conformance_settings(
                args.examples,
                args.steps,
                process_examples=args.process_examples,
                process_steps=args.process_steps,
            ),
            machines=args.machines,
            tables_dir=args.tables_dir,
            shrink=not args.no_shrink,
            shrink_seconds=args.shrink_seconds,
            seed=args.seed,
            vectors=not args.no_vectors,
            vectors_dir=args.vectors_dir,
            progress=bars,
        )
    finally:
        if bars is not None:
            bars.close()
    print(report.to_table(), end="", file=table_stream)
    if args.json == "-":
        sys.stdout.write(report.to_json())
    elif args.json:
        Path(args.json).write_text(report.to_json(), encoding="utf-8")
    return EXIT_OK if report.passed else EXIT_FAILED


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``elastic-loader``; returns the exit status."""
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as stop:
        return stop.code if isinstance(stop.code, int) else EXIT_USAGE
    if args.command == "conformance":
        return _conformance(args)
    parser.print_help(sys.stderr)
    return EXIT_USAGE


if __name__ == "__main__":
    raise SystemExit(main())
