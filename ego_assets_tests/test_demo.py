"""`make demo` end to end on a temporary folder (short captures)."""

import io
import json
from pathlib import Path

from ego_assets.capture.manifest import CAPTURE_DIR, read_manifest
from ego_assets.catalog.warehouse import catalog_database, query
from ego_assets.defs.demo import ARIA_SAMPLE_KEY, DEMO_CAPTURES, run_demo
from ego_assets.storage import Storage
from ego_assets.trajectory.store import read_header
from ego_assets.viewer.recording import RECORDING_FILE
from ego_assets_tests.test_viewer import read_back


def _files(folder: Path) -> set[str]:
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}


def test_demo_trajectories_list_no_platform_file_as_a_capture_file(tmp_path, monkeypatch):
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    data = tmp_path / "data"
    out = io.StringIO()
    assert run_demo(data, seconds=1.0, out=out) == 0
    keys = [key for key, *_ in DEMO_CAPTURES] + [ARIA_SAMPLE_KEY]
    for key in keys:
        raw = data / "raw" / key
        landed = _files(data / "landing" / key)
        platform = {rel for rel in _files(raw) if not rel.startswith(f"{CAPTURE_DIR}/")}
        assert platform == {"manifest.json"}
        assert {f.path for f in read_manifest(raw).files} == landed
        assert _files(raw / CAPTURE_DIR) == landed
        header, _ = read_header(data / "trajectory" / key)
        assert set(header.extra_files) <= landed - {"ego_capture.json"}, key
        assert not set(header.extra_files) & platform
    # the one capture that carries extra files keeps exactly them (the sample's licence
    # and origin notes), and its trajectory was made from the manifest's content
    aria = data / "trajectory" / ARIA_SAMPLE_KEY
    assert read_header(aria)[0].extra_files == ("LICENSE-Apache-2.0.txt", "README.md")
    lineage = json.loads((aria / "lineage.json").read_text())
    raw_manifest = read_manifest(data / "raw" / ARIA_SAMPLE_KEY)
    assert lineage["raw_content_sha256"] == raw_manifest.content_sha256
    assert "demo-webxr-faulty" in out.getvalue()
    # the demo built the dataset catalog once and printed its tables
    assert "export coverage" in out.getvalue()
    with catalog_database(Storage(data), write=False) as database:
        counts = query(database, "select count(*) n from episodes").to_pylist()
        formats = query(database, "select format from export_coverage order by 1").to_pylist()
    assert counts == [{"n": len(keys)}]
    assert [r["format"] for r in formats] == ["ceres_episode", "egosmith_shards", "holos_hdf5"]
    # the quality step's recording found the video in the raw copy's capture folder
    columns, _ = read_back(data / "quality" / "demo-webxr" / RECORDING_FILE)
    assert ("/world/cameras/camera_outward", "VideoFrameReference:timestamp") in columns
