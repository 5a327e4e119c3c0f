"""The aria_mps reader on the real MPS sample outputs (projectaria_tools, Apache-2.0)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from ego_assets.capture import read_capture
from ego_assets.errors import CaptureFormatError
from ego_assets.fixtures import real_fixture
from ego_assets.trajectory.store import read_trajectory, write_trajectory

FIXTURES = real_fixture("aria_mps_hand_tracking")
MPS_FILES = (
    "hand_tracking_results_v1.csv",
    "hand_tracking_results_v2.csv",
    "wrist_and_palm_poses.csv",
    "wrist_and_palm_poses_v2.csv",
    "wrist_and_palm_poses_v3.csv",
    "summary.json",
)
MARKER = {"format": "ego-capture-marker", "version": 1, "kind": "aria_mps"}


def copy_mps(root: Path, names: tuple[str, ...] = MPS_FILES) -> Path:
    """Copy fixtures into ``root`` (the packaged recordings stay untouched) and write the marker."""
    root.mkdir(parents=True)
    for name in names:
        shutil.copyfile(FIXTURES / name, root / name)
    (root / "ego_capture.json").write_text(json.dumps(MARKER))
    return root


@pytest.fixture(scope="module")
def mps(tmp_path_factory: pytest.TempPathFactory):
    root = copy_mps(tmp_path_factory.mktemp("aria") / "aria-1")
    (root / "notes.txt").write_text("kept as an extra\n")
    return read_capture("aria-1", root)


def test_first_results_row_left_landmark_zero_is_read_exactly(mps):
    hand = mps.stream("hand_tracking_results_v2.hand_left")
    assert dict(hand.attrs) == {
        "hand": "left",
        "frame": "device",
        "source_file": "hand_tracking_results_v2.csv",
        "joint_set": "aria21",
    }
    assert hand.fields["position"].shape == (8, 21, 3)
    assert hand.fields["position"][0, 0].tolist() == [0.0645316, -0.248787, 0.250952]
    assert hand.fields["hand_confidence"][0] == 0.999299


def test_timestamps_are_device_microseconds_and_the_53_second_gap_is_kept(mps):
    hand = mps.stream("hand_tracking_results_v1.hand_right")
    assert hand.timestamp_ns[:3].tolist() == [1762609162000, 1762809134000, 1816200587000]
    assert np.diff(hand.timestamp_ns).max() == 53_391_453_000
    assert mps.info.clock == "device"
    assert mps.info.start_ns == 148_502_526_000  # smallest timestamp over all files
    assert hand.time[0] == pytest.approx(1614.106636)


def test_results_files_have_three_tracked_frames_per_hand(mps):
    for version in ("v1", "v2"):
        for side in ("left", "right"):
            hand = mps.stream(f"hand_tracking_results_{version}.hand_{side}")
            assert int(hand.fields["hand_valid"].sum()) == 3
    right = mps.stream("hand_tracking_results_v2.hand_right")
    assert right.fields["hand_valid"].tolist() == [False, True, True, False, True] + [False] * 3
    assert right.fields["hand_confidence"][0] == -1.0


def test_results_wrist_stream_carries_device_wrist_pose_and_normals(mps):
    wrist = mps.stream("hand_tracking_results_v1.wrist_left")
    assert wrist.kind == "wrist_palm"
    assert wrist.fields["wrist_position"][0, 0] == 0.187311
    assert wrist.fields["wrist_rotation"][0].tolist() == [-0.184447, 0.801758, 0.436056, -0.364718]
    assert "palm_normal" not in wrist.fields
    v2 = mps.stream("hand_tracking_results_v2.wrist_right")
    assert v2.fields["palm_normal"].shape == (8, 3)
    assert v2.fields["palm_normal"][0].tolist() == [0.0, 0.0, 0.0]  # right hand missing there


def test_wrist_and_palm_poses_left_never_tracked_right_in_six_frames(mps):
    for stem in ("wrist_and_palm_poses", "wrist_and_palm_poses_v2"):
        left = mps.stream(f"{stem}.wrist_left")
        right = mps.stream(f"{stem}.wrist_right")
        assert len(left) == len(right) == 122
        assert not left.fields["hand_valid"].any()
        tracked = right.timestamp_ns[right.fields["hand_valid"]] // 1000
        assert tracked.tolist() == [
            159402529,
            159502525,
            159602526,
            159702527,
            159802527,
            159902528,
        ]
    assert (
        mps.stream("wrist_and_palm_poses.wrist_right").fields["wrist_position"][109, 0] == 0.244013
    )
    assert not mps.has_stream("wrist_and_palm_poses.hand_left")


def test_wrist_and_palm_v2_column_order_quirk_is_reported_and_values_kept(mps):
    (quirk,) = mps.quirks
    assert quirk.file == "wrist_and_palm_poses_v2.csv"
    assert quirk.rows == 116
    assert quirk.field == "right_tracking_confidence"
    right = mps.stream("wrist_and_palm_poses_v2.wrist_right")
    assert right.fields["hand_confidence"][0] == 0.0  # as read, not rewritten to -1
    assert right.fields["palm_position"][0, 2] == -1.0
    assert not right.fields["hand_valid"][0]
    assert right.fields["palm_normal"][109, 0] == 0.723122


def test_landmark_variant_gives_hands_and_wrist_from_landmarks(mps):
    left = mps.stream("wrist_and_palm_poses_v3.hand_left")
    right = mps.stream("wrist_and_palm_poses_v3.hand_right")
    assert len(left) == 63
    assert (int(left.fields["hand_valid"].sum()), int(right.fields["hand_valid"].sum())) == (60, 62)
    assert left.fields["position"][0, 0].tolist() == [0.0645316, -0.248787, 0.250952]
    wrist = mps.stream("wrist_and_palm_poses_v3.wrist_left")
    assert np.array_equal(wrist.fields["wrist_position"], left.fields["position"][:, 5])
    assert np.array_equal(wrist.fields["palm_position"], left.fields["position"][:, 20])


def test_summary_is_a_file_ref_and_other_files_are_extras(mps):
    assert [(f.role, f.path) for f in mps.files] == [("mps_summary", "summary.json")]
    assert mps.extra_files == ("notes.txt",)
    assert mps.info.source_kind == "aria-mps" and mps.info.source_version == "mps 1.2.3"
    assert len(mps.streams) == 16


def test_mps_trajectory_round_trips_through_the_store(mps, tmp_path):
    back = read_trajectory(write_trajectory(mps, tmp_path / "episode"))
    assert back.quirks == mps.quirks
    hand = back.stream("hand_tracking_results_v2.hand_left")
    assert hand.fields["position"][0, 0].tolist() == [0.0645316, -0.248787, 0.250952]


def test_capture_with_only_one_file_starts_at_its_first_timestamp(tmp_path):
    root = copy_mps(tmp_path / "one", ("hand_tracking_results_v1.csv",))
    trajectory = read_capture("one", root)
    assert trajectory.info.start_ns == 1_762_609_162_000
    assert trajectory.stream("hand_tracking_results_v1.hand_left").time[0] == 0.0
    assert trajectory.files == ()


def _rewrite(path: Path, line_no: int, old: str, new: str) -> None:
    lines = path.read_text().splitlines()
    assert old in lines[line_no]
    lines[line_no] = lines[line_no].replace(old, new, 1)
    path.write_text("\n".join(lines) + "\n")


def test_missing_column_is_named(tmp_path):
    root = copy_mps(tmp_path / "bad", ("hand_tracking_results_v2.csv",))
    _rewrite(root / "hand_tracking_results_v2.csv", 0, ",nz_right_wrist_device", "")
    with pytest.raises(CaptureFormatError) as info:
        read_capture("bad", root)
    assert (info.value.file, info.value.field, info.value.row) == (
        "hand_tracking_results_v2.csv",
        "nz_right_wrist_device",
        0,
    )


def test_text_in_a_float_column_names_field_and_row(tmp_path):
    root = copy_mps(tmp_path / "bad", ("wrist_and_palm_poses.csv",))
    _rewrite(root / "wrist_and_palm_poses.csv", 3, ",-1,", ",abc,")
    with pytest.raises(CaptureFormatError) as info:
        read_capture("bad", root)
    err = info.value
    assert (err.file, err.field, err.row) == (
        "wrist_and_palm_poses.csv",
        "left_tracking_confidence",
        3,
    )
    assert "row 3" in str(err) and "field 'left_tracking_confidence'" in str(err)


def test_capture_without_any_mps_csv_is_an_error(tmp_path):
    root = copy_mps(tmp_path / "bad", ("summary.json",))
    with pytest.raises(CaptureFormatError, match="no MPS hand-tracking file"):
        read_capture("bad", root)
