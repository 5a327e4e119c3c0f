"""Every file the demo exports is byte-identical to the recorded digests
(``bench/results/export_digests.json``, recorded at the commit before the exporters
moved into ``ego_assets/exports/``), write times aside (`bench.export_digests.TIME_FIELDS`).

A change that alters exported bytes on purpose records the digests again (see
``bench/export_digests.py``)."""

from __future__ import annotations

import json

from bench.export_digests import BASELINE, compare, run


def test_the_demo_exports_the_recorded_bytes(tmp_path):
    baseline = json.loads(BASELINE.read_text())
    result = run(baseline["seconds"], tmp_path / "data")
    assert result["demo_status"] == 0
    assert len(result["files"]) == len(baseline["files"]) > 60
    assert compare(result, baseline) == []
