"""Layering rules, enforced on the source tree.

* ``elastic_loader.spec`` imports only the standard library (and itself).
* The pipeline (every module outside ``spec/``, ``testing/`` and ``examples/``)
  never imports the spec, so the differential tests compare two independent
  implementations.
* Inside the pipeline, modules import downwards only (no cycles, nothing but
  ``loader`` imports ``dataset``), and no module imports or reads another
  pipeline module's private names.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import elastic_loader

PACKAGE = Path(elastic_loader.__file__).parent
SPEC = PACKAGE / "spec"
NOT_PIPELINE = {"spec", "testing", "examples"}


def _imports(path: Path) -> list[tuple[str, int]]:
    """Absolute module names imported by ``path`` (relative imports resolved)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    # The package a module lives in (for ``pkg/__init__.py`` that is ``pkg`` itself).
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)[:-1]
    found: list[tuple[str, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = parts[: len(parts) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
                found += [(name, node.lineno)]
                found += [(f"{name}.{a.name}", node.lineno) for a in node.names]
            else:
                assert node.module is not None
                found.append((node.module, node.lineno))
                found += [(f"{node.module}.{a.name}", node.lineno) for a in node.names]
    return found


def test_spec_imports_only_the_standard_library() -> None:
    offenders = []
    for path in sorted(SPEC.rglob("*.py")):
        for name, line in _imports(path):
            top = name.split(".")[0]
            if name.startswith("elastic_loader.spec") or top == "__future__":
                continue
            if top not in sys.stdlib_module_names:
                offenders.append(f"{path.relative_to(PACKAGE)}:{line} imports {name}")
    assert not offenders, "\n".join(offenders)


def _pipeline_files() -> list[Path]:
    return [p for p in sorted(PACKAGE.rglob("*.py")) if p.relative_to(PACKAGE).parts[0] not in NOT_PIPELINE]


def test_pipeline_never_imports_the_spec() -> None:
    files = _pipeline_files()
    assert files, "no pipeline modules found"
    offenders = [
        f"{path.relative_to(PACKAGE)}:{line} imports {name}"
        for path in files
        for name, line in _imports(path)
        if name == "elastic_loader.spec" or name.startswith("elastic_loader.spec.")
    ]
    assert not offenders, "\n".join(offenders)


def test_importing_the_package_does_not_load_the_spec() -> None:
    code = "import sys, elastic_loader; print(any(m.startswith('elastic_loader.spec') for m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_layering_check_detects_an_offender(tmp_path: Path) -> None:
    """The checker itself must see a relative import of the spec."""
    fake = PACKAGE / "_layering_probe.py"
    fake.write_text("from .spec import rows\n")
    try:
        names = [n for n, _ in _imports(fake)]
        assert "elastic_loader.spec" in names
    finally:
        fake.unlink()


PIPELINE = PACKAGE / "_pipeline"


def _pipeline_imports(path: Path) -> tuple[set[str], list[str]]:
    """The pipeline modules ``path`` imports, and its uses of their private names."""
    tree = ast.parse(path.read_text(), filename=str(path))
    modules: set[str] = set()
    aliases: dict[str, str] = {}
    private: list[str] = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.ImportFrom) and node.level == 1):
            continue
        for alias in node.names:
            module = node.module or alias.name
            modules.add(module)
            if node.module is None:
                aliases[alias.asname or alias.name] = alias.name
            elif alias.name.startswith("_"):
                private.append(f"{path.name}:{node.lineno} imports {module}.{alias.name}")
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)):
            continue
        if node.value.id in aliases and node.attr.startswith("_"):
            private.append(f"{path.name}:{node.lineno} uses {aliases[node.value.id]}.{node.attr}")
    return modules, private


def test_pipeline_modules_use_no_private_name_of_another_and_import_downwards() -> None:
    graph: dict[str, set[str]] = {}
    offenders: list[str] = []
    for path in sorted(PIPELINE.glob("*.py")):
        modules, private = _pipeline_imports(path)
        graph[path.stem] = modules
        offenders += private
    assert not offenders, "\n".join(offenders)
    done: set[str] = set()

    def visit(module: str, stack: tuple[str, ...]) -> None:
        assert module not in stack, f"import cycle: {' -> '.join((*stack, module))}"
        if module in done:
            return
        for imported in graph.get(module, set()):
            visit(imported, (*stack, module))
        done.add(module)

    for module in graph:
        visit(module, ())
    assert "dataset" not in {m for name, ms in graph.items() if name != "loader" for m in ms}
