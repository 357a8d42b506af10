"""The size and coupling rules of the code base (docs/ARCHITECTURE.md, "Rules of the layout").

Rules checked here, statically, on ``src/elastic_loader``:

- ``StreamingDataset`` (the facade) is at most 350 lines;
- a module over 600 lines says why at its top: its docstring holds the words
  "longer than 600 lines" and the reason;
- a function or method in ``_pipeline/`` or ``testing/`` is at most 80 lines
  (its branches are bounded by ruff's C901 at 15, see pyproject.toml);
- no module uses another module's private names: nothing imports ``_name``
  from a module of the package, and ``x._name`` is read only on ``self``,
  ``cls`` or an object of the module's own classes. This test sees names
  only: it catches a read on a package module's alias and on a parameter
  annotated with a class the package defines in another module. Third-party
  private names (a backend's ``_conn``) are outside the rule; each such use
  says why next to it.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "elastic_loader"
FACADE_LIMIT = 350
MODULE_LIMIT = 600
FUNCTION_LIMIT = 80
REASON = "longer than 600 lines"


def _modules() -> Iterator[Path]:
    yield from sorted(SRC.rglob("*.py"))


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), filename=str(path))


def _span(node: ast.AST) -> int:
    return int(getattr(node, "end_lineno", 0)) - int(getattr(node, "lineno", 0)) + 1


def _rel(path: Path) -> str:
    return path.relative_to(SRC).as_posix()


def test_StreamingDataset_is_a_small_facade() -> None:
    tree = _tree(SRC / "_pipeline" / "dataset.py")
    (cls,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "StreamingDataset"]
    assert _span(cls) <= FACADE_LIMIT, f"StreamingDataset is {_span(cls)} lines (at most {FACADE_LIMIT})"


def test_long_modules_say_why_at_their_top() -> None:
    unexplained = []
    for path in _modules():
        lines = len(path.read_text().splitlines())
        doc = ast.get_docstring(_tree(path)) or ""
        if lines > MODULE_LIMIT and REASON not in " ".join(doc.split()):
            unexplained.append(f"{_rel(path)} ({lines} lines)")
    assert not unexplained, f"modules over {MODULE_LIMIT} lines without a reason at their top: {unexplained}"


def _functions(tree: ast.AST) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield node


@pytest.mark.parametrize("room", ["_pipeline", "testing"])
def test_functions_are_short(room: str) -> None:
    long = [
        f"{_rel(path)}:{fn.lineno} {fn.name} ({_span(fn)} lines)"
        for path in sorted((SRC / room).rglob("*.py"))
        for fn in _functions(_tree(path))
        if _span(fn) > FUNCTION_LIMIT
    ]
    assert not long, f"functions over {FUNCTION_LIMIT} lines: {long}"


def _submodule(path: Path, node: ast.ImportFrom, name: str) -> bool:
    """Whether ``from <node.module> import <name>`` imports a module (not a member)."""
    if not node.level:
        parts = (node.module or "").split(".")
        if parts[0] != "elastic_loader":
            return False
        base = SRC.joinpath(*parts[1:])
    else:
        base = path.parent
        for _ in range(node.level - 1):
            base = base.parent
        base = base.joinpath(*(node.module or "").split(".")) if node.module else base
    return (base / f"{name}.py").exists() or (base / name).is_dir()


@functools.cache
def _package_classes() -> frozenset[str]:
    trees = [_tree(path) for path in _modules()]
    return frozenset(n.name for tree in trees for n in ast.walk(tree) if isinstance(n, ast.ClassDef))


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _private_uses(path: Path) -> Iterator[str]:
    tree = _tree(path)
    own_classes = {n.name for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}
    aliases: set[str] = set()  # names bound to modules or to other modules' objects
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module != "__future__":
            for alias in node.names:
                bound = alias.asname or alias.name
                if _submodule(path, node, alias.name):
                    aliases.add(bound)
                elif _private(alias.name):
                    yield f"{_rel(path)}:{node.lineno} imports {alias.name}"
    for fn in _functions(tree):
        for arg in [*fn.args.args, *fn.args.kwonlyargs]:
            annotation = ast.unparse(arg.annotation) if arg.annotation else ""
            cls = annotation.split("[")[0].split(".")[-1].strip("'\"")
            if cls in _package_classes() and cls not in own_classes and arg.arg not in ("self", "cls"):
                aliases.add(arg.arg)
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)):
            continue
        if _private(node.attr) and node.value.id in aliases - {"self", "cls"}:
            yield f"{_rel(path)}:{node.lineno} reads {node.value.id}.{node.attr}"


def test_no_module_uses_another_modules_private_names() -> None:
    uses = [use for path in _modules() for use in _private_uses(path)]
    assert not uses, "private names used across modules:\n" + "\n".join(uses)
