"""Public names: listed once (``_EXPORTS``), loaded lazily, shown as ``elastic_loader.X``.

* The ``TYPE_CHECKING`` imports of ``elastic_loader`` and ``elastic_loader.testing``
  (what type checkers read) name exactly the names and modules of ``_EXPORTS``
  (what runs), and ``__all__`` is ``_EXPORTS`` (plus ``__version__``).
* Every public class and function of ``elastic_loader`` has ``__module__ ==
  "elastic_loader"``, even when imported from its private module first.
* Importing the spec loads neither torch nor LanceDB; importing the testing
  package loads neither Hypothesis, LanceDB nor torch.
"""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

import elastic_loader
import elastic_loader.testing

PACKAGES = [elastic_loader, elastic_loader.testing]


def _type_checking_imports(package: ModuleType) -> dict[str, str]:
    """Name -> relative module of every ``from .m import X as X`` under ``if TYPE_CHECKING:``."""
    assert package.__file__ is not None
    tree = ast.parse(Path(package.__file__).read_text())
    found: dict[str, str] = {}
    for node in tree.body:
        test = node.test if isinstance(node, ast.If) else None
        if not (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING"):
            continue
        assert isinstance(node, ast.If)
        for statement in node.body:
            assert isinstance(statement, ast.ImportFrom), ast.dump(statement)
            for alias in statement.names:
                assert alias.asname == alias.name, f"{alias.name} must be re-exported as itself"
                assert alias.name not in found, f"{alias.name} is imported twice"
                found[alias.name] = "." * statement.level + (statement.module or "")
    return found


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: p.__name__)
def test_type_checking_imports_list_the_exports(package: ModuleType) -> None:
    exports = vars(package)["_EXPORTS"]
    assert _type_checking_imports(package) == exports
    assert [n for n in package.__all__ if n != "__version__"] == list(exports)


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: p.__name__)
def test_every_export_resolves_from_its_module(package: ModuleType) -> None:
    for name, module in vars(package)["_EXPORTS"].items():
        defining = importlib.import_module(module, package.__name__)
        assert getattr(package, name) is getattr(defining, name), name
    assert set(package.__all__) <= set(dir(package))


def test_public_classes_and_functions_are_shown_under_elastic_loader() -> None:
    public = [getattr(elastic_loader, n) for n in elastic_loader.__all__]
    objects = [obj for obj in public if isinstance(obj, type) or callable(obj)]
    assert {obj.__name__ for obj in objects} == {
        "StreamingDataset",
        "StreamingDataLoader",
        "merge_state_dicts",
        "Statistics",
        "LocalShuffle",
        "StreamingMixture",
        "MixtureSource",
    }
    for obj in objects:
        assert obj.__module__ == "elastic_loader", obj
    assert elastic_loader.StreamingDataset.state_dict.__module__ == "elastic_loader"


def _run(code: str) -> str:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return out.stdout.strip()


def test_the_private_path_shows_the_public_module_too() -> None:
    code = (
        "import pickle\n"
        "from elastic_loader._pipeline.dataset import StreamingDataset\n"
        "print(StreamingDataset.__module__, b'elastic_loader._pipeline' in pickle.dumps(StreamingDataset))"
    )
    assert _run(code) == "elastic_loader False"


def test_importing_the_spec_loads_neither_torch_nor_lancedb() -> None:
    code = "import sys, elastic_loader.spec; print(sorted({'torch', 'lancedb', 'lance'} & set(sys.modules)))"
    assert _run(code) == "[]"


def test_importing_the_testing_package_loads_nothing_heavy() -> None:
    code = (
        "import sys, elastic_loader.testing\n"
        "print(sorted({'hypothesis', 'torch', 'lancedb', 'lance'} & set(sys.modules)))"
    )
    assert _run(code) == "[]"
