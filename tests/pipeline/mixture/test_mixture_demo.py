"""The torchrun mixture demo (``python -m elastic_loader.examples.demo --mixture``), end to end.

Four gloo processes train on a 3-source mixture, are killed with SIGKILL mid-epoch, and two
processes resume with other weights; the demo's self-check (proportions, scheduled sources per
global step, no repeated or lost sample per source) must pass.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from elastic_loader.examples import demo


@pytest.mark.slow
def test_mixture_demo_kill_resume_with_new_weights_passes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert demo.main(["--mixture", "--dir", str(tmp_path), "--scale", "4", "--seed", "3"]) == 0
    out = capsys.readouterr().out
    assert "[ok] no repeated or lost sample per source" in out
    assert "[ok] the new weights apply from the resumed step on (a second regime)" in out
    assert out.count("realised") == 2
