"""Every ``python`` code block of README.md and docs/*.md runs, as written.

A block runs in a namespace that holds what its prose assumes (a table, the rank, a place to save
to, a process group): :data:`CONTEXTS` prepares it, keyed by ``(file, index of the block in the
file)``. A block without a context fails :func:`test_every_snippet_has_a_context`, so a new snippet
cannot go untested.
"""

from __future__ import annotations

import functools
import os
import re
import socket
import sys
import types
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import lancedb
import pyarrow as pa
import pytest

ROOT = Path(__file__).resolve().parents[2]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)


def snippets() -> Iterator[tuple[str, int, str]]:
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for index, match in enumerate(BLOCK.finditer(path.read_text())):
            yield str(path.relative_to(ROOT)), index, match.group(1)


def corpus(db: Path, name: str, rows: int) -> Any:
    tokens = [[7 + i % 11] * (3 + i % 29) for i in range(rows)]
    data = pa.table(
        {"id": pa.array(range(rows), pa.int64()), "tokens": pa.array(tokens, pa.list_(pa.int64()))}
    )
    return lancedb.connect(str(db)).create_table(name, data, mode="overwrite")


def readme_use_it(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """One rank of one, a corpus at data/db, saves kept in a dict."""
    monkeypatch.chdir(tmp)
    corpus(tmp / "data" / "db", "corpus", 640)
    saved: dict[int, dict[str, object]] = {}
    return {
        "rank": 0,
        "world_size": 1,
        "old_world_size": 1,
        "new_world_size": 1,
        "train_step": lambda batch: None,
        "save": saved.__setitem__,
        "load": saved.__getitem__,
    }


def checkpoints_guide(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    corpus(tmp / "db", "corpus", 96)
    return {"db_path": str(tmp / "db")}


def conformance_run(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """``mypkg.streaming`` is elastic-loader itself; the block runs as a script (``__main__``).

    The block runs every machine and vector family through the public entry point, with a small
    Hypothesis budget (the default one took 60 s here); the default budget's verdict on
    elastic-loader is ``tests/conformance/test_conformance.py``'s."""
    import elastic_loader
    from elastic_loader.testing.conformance import resolve

    small = functools.partial(
        resolve.conformance_settings,
        examples=4,
        steps=8,
        process_examples=1,
        process_steps=1,
        mixture_examples=2,
        mixture_steps=4,
    )
    monkeypatch.setattr(resolve, "conformance_settings", small)
    package = types.ModuleType("mypkg")
    package.streaming = elastic_loader  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "mypkg", package)
    monkeypatch.setitem(sys.modules, "mypkg.streaming", elastic_loader)
    return {"__name__": "__main__"}


def conformance_protocol(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The adapter protocol's listing: the names it uses."""
    from collections.abc import Iterable

    from elastic_loader.testing.adapters import DatasetLike

    return {
        "Protocol": Protocol,
        "DatasetLike": DatasetLike,
        "Iterable": Iterable,
        "Sequence": Sequence,
        "Mapping": Mapping,
    }


def conformance_replay(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    monkeypatch.chdir(tmp)
    return {"Path": Path}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def distributed_loop(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """A one-process gloo group, the table and opener of examples/train.py, a model to save."""
    import torch

    from elastic_loader.examples.train import TableOpener

    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(_free_port()))
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    table = corpus(tmp / "db", "examples", 240)
    model = torch.nn.Linear(2, 1)
    return {
        "path": tmp / "ckpt" / "checkpoint.pt",
        "table": table,
        "opener": TableOpener(str(tmp / "db")),
        "model": model,
        "optimizer": torch.optim.SGD(model.parameters(), lr=0.1),
        "cycles": 2,
        "step": 0,
    }


def distributed_opener(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    from dataclasses import dataclass

    from elastic_loader.examples.train import storage_options_from_env

    return {"dataclass": dataclass, "lancedb": lancedb, "storage_options_from_env": storage_options_from_env}


def integrations_guide(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """A 96-row corpus at db_path; checkpoints are written to the working directory."""
    pytest.importorskip("pytorch_lightning")
    monkeypatch.chdir(tmp)
    corpus(tmp / "db", "corpus", 96)
    return {"db_path": str(tmp / "db")}


def pipeline_columnar(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """A 640-row corpus at db_path (columnar and packed batches)."""
    corpus(tmp / "db", "corpus", 640)
    return {"db_path": str(tmp / "db")}


def mixtures_guide(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Three small tables ``web``, ``code`` and ``books`` (``id``, ``text``); one rank of one."""
    db = lancedb.connect(str(tmp / "db"))
    for name, rows in (("web", 160), ("code", 96), ("books", 48)):
        ids = list(range(rows))
        db.create_table(name, pa.table({"id": ids, "text": [f"{name}-{i}" for i in ids]}), mode="overwrite")
    return {"db_path": str(tmp / "db"), "rank": 0, "world_size": 1}


Context = Callable[[Path, pytest.MonkeyPatch], dict[str, Any]]

CONTEXTS: dict[tuple[str, int], Context] = {
    ("README.md", 0): readme_use_it,
    ("docs/CHECKPOINTS.md", 0): checkpoints_guide,
    ("docs/CONFORMANCE.md", 0): conformance_run,
    ("docs/CONFORMANCE.md", 1): conformance_protocol,
    ("docs/CONFORMANCE.md", 2): conformance_replay,
    ("docs/DISTRIBUTED.md", 0): distributed_loop,
    ("docs/DISTRIBUTED.md", 1): distributed_opener,
    ("docs/INTEGRATIONS.md", 0): integrations_guide,
    ("docs/INTEGRATIONS.md", 1): integrations_guide,
    ("docs/INTEGRATIONS.md", 2): integrations_guide,
    ("docs/INTEGRATIONS.md", 3): integrations_guide,
    ("docs/PIPELINE.md", 0): checkpoints_guide,
    ("docs/PIPELINE.md", 1): pipeline_columnar,
    ("docs/PIPELINE.md", 2): pipeline_columnar,
    ("docs/MIXTURES.md", 0): mixtures_guide,
}

ALL = list(snippets())


def test_every_snippet_has_a_context() -> None:
    missing = [f"{path} block {index}" for path, index, _ in ALL if (path, index) not in CONTEXTS]
    assert not missing, f"python blocks without a context in tests/meta/test_docs_snippets.py: {missing}"
    stale = sorted(set(CONTEXTS) - {(path, index) for path, index, _ in ALL})
    assert not stale, f"contexts of blocks that no longer exist: {stale}"


@pytest.mark.parametrize(("path", "index", "code"), ALL, ids=[f"{p}#{i}" for p, i, _ in ALL])
def test_snippet_runs(
    path: str, index: int, code: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    context = CONTEXTS[(path, index)](tmp_path, monkeypatch)
    if context.get("__name__") == "__main__":
        namespace = context
    else:  # a real module, so that classes defined in the block (dataclasses) find their module
        module = types.ModuleType(f"snippet_{index}")
        monkeypatch.setitem(sys.modules, module.__name__, module)
        namespace = module.__dict__
        namespace.update(context)
    try:
        exec(compile(code, f"{path} (python block {index})", "exec"), namespace)
    finally:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
    os.environ.pop("MASTER_PORT", None)
