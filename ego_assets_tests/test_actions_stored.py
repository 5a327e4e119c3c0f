"""`action_sources.arrow`: written by the normalize step, read by a release's derivation,
the same state and actions bit for bit as deriving from the streams; ignored (the streams
read instead) when it was written by another version or beside another capture.json."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ego_assets import pipeline
from ego_assets.actions import ActionSpace, derive_actions
from ego_assets.actions import stored as stored_module
from ego_assets.actions.derive import demo_clock, derive_from_sources
from ego_assets.actions.sources import action_sources
from ego_assets.actions.stored import SOURCES_FILE, read_sources, write_sources
from ego_assets.capture import read_capture
from ego_assets.releases import derived
from ego_assets.storage import Storage
from ego_assets.synth import KINDS, synthesize
from ego_assets.trajectory.store import read_trajectory, write_trajectory

SPACES = (
    ActionSpace(space="eef_pose_gripper", frame="head"),
    ActionSpace(space="eef_pose_gripper", frame="world", rotation="xyzw", horizon=3),
    ActionSpace(space="fingertips", hands="dominant", relative=True, horizon=2),
)


def _same_table(a, b) -> None:
    np.testing.assert_array_equal(a.sample_ns, b.sample_ns)
    np.testing.assert_array_equal(a.state, b.state)  # NaN where NaN, else the same bits
    np.testing.assert_array_equal(a.action, b.action)
    assert a.state_names == b.state_names and a.action_names == b.action_names
    assert set(a.valid) == set(b.valid)
    for name in a.valid:
        np.testing.assert_array_equal(a.valid[name], b.valid[name])
    assert json.dumps(a.info, sort_keys=True) == json.dumps(b.info, sort_keys=True)


@pytest.mark.parametrize("kind", KINDS)
def test_stored_sources_derive_the_same_tables_as_the_streams(kind, tmp_path):
    synthesize(kind, tmp_path / "capture", seconds=2.0, seed=7)
    trajectory = read_capture(kind, tmp_path / "capture")
    folder = write_trajectory(trajectory, tmp_path / "trajectory")
    write_sources(action_sources(trajectory), folder)
    stored = read_sources(folder)
    assert stored is not None
    computed = action_sources(trajectory)
    assert stored.capture_id == computed.capture_id and stored.start_ns == computed.start_ns
    for side in ("left", "right"):
        mine, theirs = stored.hands[side], computed.hands[side]
        assert (mine is None) == (theirs is None)
        if mine is not None and theirs is not None:
            np.testing.assert_array_equal(mine.wrist, theirs.wrist)
            np.testing.assert_array_equal(mine.timestamp_ns, theirs.timestamp_ns)
            assert mine.wrist.dtype == np.float64 and mine.tracked.dtype == np.bool_
            assert dict(mine.components) == dict(theirs.components)
    for space in SPACES:
        clock, _ = demo_clock(trajectory)
        assert len(clock) > 10
        table = derive_actions(trajectory, space, clock)
        _same_table(derive_from_sources(stored, space, table.sample_ns), table)


def test_normalize_writes_the_sources_and_a_release_reads_them(tmp_path):
    storage = Storage(tmp_path)
    synthesize("webxr", tmp_path / "landing" / "cap-a", seconds=2.0, seed=3, capture_id="cap-a")
    pipeline.ingest_raw(storage, "cap-a")
    pipeline.normalize(storage, "cap-a")
    folder = tmp_path / "trajectory" / "cap-a"
    assert (folder / SOURCES_FILE).is_file()
    trajectory = read_trajectory(folder)
    space = SPACES[0]
    expected = derive_actions(trajectory, space, demo_clock(trajectory)[0])
    before = derived.derivation_cpu_s()
    table = derived.derive(tmp_path, "cap-a", space, expected.sample_ns)
    _same_table(table, expected)
    assert derived.derivation_cpu_s() > before  # counted
    assert derived.load_sources(tmp_path, "cap-a").recorder_slots is not None


def test_a_stale_or_foreign_sources_file_is_ignored(tmp_path, monkeypatch):
    storage = Storage(tmp_path)
    synthesize("holos-visionpro", tmp_path / "landing" / "cap-b", seconds=2.0, seed=5)
    pipeline.ingest_raw(storage, "cap-b")
    pipeline.normalize(storage, "cap-b")
    folder = tmp_path / "trajectory" / "cap-b"
    trajectory = read_trajectory(folder)
    assert read_sources(folder) is not None
    # another version of the file: not read
    monkeypatch.setattr(stored_module, "SOURCES_VERSION", "action-sources-0")
    assert read_sources(folder) is None
    monkeypatch.undo()
    # the header changed after the file was written (the left hand dropped): not read,
    # and the release derives from the streams the header lists
    header = json.loads((folder / "capture.json").read_text())
    left = [s for s in header["streams"] if s["attrs"].get("hand") == "left"]
    assert left
    header["streams"] = [s for s in header["streams"] if s not in left]
    (folder / "capture.json").write_text(json.dumps(header))
    assert read_sources(folder) is None
    space = SPACES[0]
    table = derived.derive(tmp_path, "cap-b", space, demo_clock(trajectory)[0])
    assert table.info["hands"]["left"]["streams"] == []
    assert np.isnan(table.state[:, table.state_names.index("left.eef.x")]).all()
    assert not table.valid["left"].any()
    # no file at all: the streams
    (folder / SOURCES_FILE).unlink()
    again = derived.derive(tmp_path, "cap-b", space, demo_clock(trajectory)[0])
    _same_table(again, table)


def test_a_damaged_sources_file_fails_naming_the_capture(tmp_path):
    storage = Storage(tmp_path)
    synthesize("webxr", tmp_path / "landing" / "cap-c", seconds=1.0, seed=1, capture_id="cap-c")
    pipeline.ingest_raw(storage, "cap-c")
    pipeline.normalize(storage, "cap-c")
    path = tmp_path / "trajectory" / "cap-c" / SOURCES_FILE
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(derived.ActionsError) as err:
        derived.load_sources(tmp_path, "cap-c")
    assert "capture cap-c" in str(err.value) and SOURCES_FILE in str(err.value)
