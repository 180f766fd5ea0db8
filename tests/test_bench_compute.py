"""``simcluster bench compute``: the OSU programs under mpirun's measured compute report the model.

A benchmark of wall-clock measurement, so slow (``pytest -m slow``): on a loaded
machine a burst of another process's work can land in a rank's few microseconds
between calls. The medians of three runs are checked against the network model
from 64 KiB up: 5%, latency 5% + 0.2 us.
"""

from __future__ import annotations

import pytest

from simcluster.bench import compute


@pytest.mark.slow
def test_the_osu_programs_report_the_network_model_from_64_kib_up(
        capsys: pytest.CaptureFixture[str]) -> None:
    figures = compute.main(repeats=3)
    out = capsys.readouterr().out
    assert "osu_latency.py: median of 3 run(s)" in out and "osu_bw.py" in out
    default = {script: figures[script]["cpu (default)"] for script in compute.SCRIPTS}
    assert sorted(default["osu_latency.py"]) == [1 << k for k in range(16, 21)]
    off = {script: {size: (model, median) for size, (model, median, ok) in rows.items() if not ok}
           for script, rows in default.items()}
    assert off == {"osu_latency.py": {}, "osu_bw.py": {}}
