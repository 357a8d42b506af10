"""Closing a loader: a worker that dies while torch stops it is logged, any other error raised."""

from __future__ import annotations

import logging

import pytest

from elastic_loader._pipeline.loader import _shut_down


def _raise(message: str) -> None:
    raise RuntimeError(message)


def test_a_worker_dying_during_shutdown_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="elastic_loader"):
        _shut_down(lambda: _raise("DataLoader worker (pid 7) is killed by signal: Aborted."))
    assert "died while it was being shut down" in caplog.text and "pid 7" in caplog.text


def test_any_other_shutdown_error_is_raised() -> None:
    with pytest.raises(RuntimeError, match="something else"):
        _shut_down(lambda: _raise("something else"))
