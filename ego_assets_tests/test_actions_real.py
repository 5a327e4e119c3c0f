"""Action spaces on the real recordings the package ships, against independent figures.

* Project Aria MPS sample (projectaria_tools): hands in the device frame; the values are
  recomputed here from the CSV columns with scipy.
* handy.js Quest poses: 25 wrist-local joints per pose (mm) and the head pose of each
  recording, placed in a world frame here; the fingertips must come back as recorded.
"""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from scipy.spatial.transform import Rotation

from ego_assets.actions import ActionSpace, ActionSpaceError, derive_actions
from ego_assets.capture import read_capture
from ego_assets.capture.egosmith_webdataset import rot6d_matrix as rot6d_to_matrix
from ego_assets.fixtures import real_fixture
from ego_assets.trajectory.model import CaptureInfo, Trajectory
from ego_assets.trajectory.streams import make_stream

ARIA = real_fixture("aria_mps_hand_tracking")
MARKER = {"format": "ego-capture-marker", "version": 1, "kind": "aria_mps"}
EEF = ActionSpace(space="eef_pose_gripper", frame="head")
FINGERTIPS = ActionSpace(space="fingertips")


def _aria(root: Path, names: tuple[str, ...]) -> Trajectory:
    root.mkdir(parents=True)
    for name in names:
        shutil.copyfile(ARIA / name, root / name)
    (root / "ego_capture.json").write_text(json.dumps(MARKER))
    return read_capture(root.name, root)


def _csv_rows(name: str) -> list[dict[str, float]]:
    with (ARIA / name).open(newline="") as f:
        return [{k: float(v) for k, v in row.items()} for row in csv.DictReader(f)]


def _xyz(row: dict[str, float], stem: str) -> np.ndarray:
    return np.array([row[f"t{a}_{stem}"] for a in "xyz"])


def _column(table, name: str) -> np.ndarray:
    return table.state[:, table.state_names.index(name)].astype(np.float64)


def test_aria_results_wrist_pose_and_fingertips_match_the_csv(tmp_path):
    trajectory = _aria(tmp_path / "aria-v2", ("hand_tracking_results_v2.csv",))
    eef = derive_actions(trajectory, EEF)
    tips = derive_actions(trajectory, FINGERTIPS)
    assert eef.info["hands"]["left"]["components"]["wrist_rotation"].startswith(
        "exact: the wrist pose of hand_tracking_results_v2.wrist_left"
    )
    rows = _csv_rows("hand_tracking_results_v2.csv")
    assert eef.sample_ns.tolist() == [int(r["tracking_timestamp_us"]) * 1000 for r in rows]
    checked = 0
    for i, row in enumerate(rows):
        for side in ("left", "right"):
            tracked = row[f"{side}_tracking_confidence"] > 0
            assert eef.valid[side][i] == tracked
            if not tracked:
                assert np.isnan(eef.state[i, [n.startswith(side) for n in eef.state_names]]).all()
                continue
            wrist = _xyz(row, f"{side}_device_wrist")
            quat = [row[f"q{a}_{side}_device_wrist"] for a in "xyzw"]
            rotation = Rotation.from_quat(quat).as_matrix()
            # head frame of a device-frame recording: the device frame itself
            got = [_column(eef, f"{side}.eef.{a}")[i] for a in "xyz"]
            assert np.abs(np.array(got) - wrist).max() < 1e-6
            six = np.array([_column(eef, f"{side}.eef.rot6d_{k}")[i] for k in range(6)])
            assert np.abs(six - np.r_[rotation[:, 0], rotation[:, 1]]).max() < 1e-6
            points = np.stack([_xyz(row, f"{side}_landmark_{k}_device") for k in range(5)])
            local = (points - wrist) @ rotation  # R^T (p - wrist), row vectors
            got_tips = np.array(
                [
                    _column(tips, f"{side}.{finger}_tip.{a}")[i]
                    for finger in ("thumb", "index", "middle", "ring", "pinky")
                    for a in "xyz"
                ]
            ).reshape(5, 3)
            assert np.abs(got_tips - local).max() < 1e-6
            aperture = np.linalg.norm(points[0] - points[1])
            assert _column(eef, f"{side}.grasp_aperture")[i] == pytest.approx(aperture, abs=1e-6)
            # a real hand: thumb to index within a hand span, tips 5-25 cm from the wrist
            assert 0.0 < aperture < 0.2
            assert (np.linalg.norm(local, axis=1) > 0.05).all()
            assert (np.linalg.norm(local, axis=1) < 0.25).all()
            checked += 1
    assert checked == 6  # three tracked rows per hand


def test_aria_full_sample_derives_a_proper_wrist_frame_from_landmarks(tmp_path):
    names = tuple(p.name for p in sorted(ARIA.glob("*.csv")))
    trajectory = _aria(tmp_path / "aria-all", names)
    eef = derive_actions(trajectory, EEF)
    tips = derive_actions(trajectory, FINGERTIPS)
    right = eef.info["hands"]["right"]
    assert right["streams"] == ["wrist_and_palm_poses_v3.hand_right"]  # most tracked rows
    assert right["components"]["wrist_rotation"].startswith("approximate: derived")
    valid = eef.valid["right"]
    assert valid.sum() >= 60
    six = np.stack([_column(eef, f"right.eef.rot6d_{k}") for k in range(6)], axis=1)[valid]
    matrix = rot6d_to_matrix(six)
    assert np.abs(np.linalg.det(matrix) - 1).max() < 1e-5
    assert np.abs(np.linalg.norm(six[:, :3], axis=1) - 1).max() < 1e-5
    # the derived wrist axes: fingers point along -z, so the middle tip has z < 0
    middle_z = _column(tips, "right.middle_tip.z")[tips.valid["right"]]
    assert (middle_z < -0.1).all()
    distances = np.linalg.norm(tips.state.reshape(len(tips.state), 10, 3), axis=2)
    finite = distances[np.isfinite(distances)]
    assert len(finite) > 500 and finite.min() > 0.05 and finite.max() < 0.25
    aperture = _column(eef, "right.grasp_aperture")[valid]
    assert (aperture > 0).all() and (aperture < 0.2).all()


def test_aria_has_no_world_frame_without_a_device_trajectory(tmp_path):
    trajectory = _aria(tmp_path / "aria-w", ("hand_tracking_results_v2.csv",))
    with pytest.raises(ActionSpaceError) as caught:
        derive_actions(trajectory, ActionSpace(space="eef_pose_gripper", frame="world"))
    assert caught.value.key == "frame"
    assert "'aria-w'" in caught.value.message and "device frame" in caught.value.message


START_NS = 1_621_881_514_856_000_000


def _handy(side: str) -> list[dict]:
    return json.loads((real_fixture("handy_js") / f"handy_poses_{side}.json").read_text())


def _handy_trajectory() -> tuple[Trajectory, dict[str, Rotation], dict[str, np.ndarray]]:
    """Each hand's 55 recorded poses at 30 Hz, its wrist turning and moving in a world
    frame; the head stream places the right hand's recorded head pose in that world:
    position = wrist + R_wrist headPosition, rotation = headRotation (as recorded)."""
    streams = []
    wrists: dict[str, Rotation] = {}
    origins: dict[str, np.ndarray] = {}
    for side in ("left", "right"):
        records = _handy(side)
        n = len(records)
        t = np.arange(n) / 30.0
        ts = START_NS + np.rint(t * 1e9).astype(np.int64)
        local = np.asarray([r["jointPositions"] for r in records], np.float64) / 1000.0
        r_w = Rotation.from_rotvec(np.stack([0.3 * np.sin(t), 0.5 + 0.2 * t, 0.1 * t], axis=1))
        p_w = np.stack([0.2 * np.cos(t), 1.2 + 0.1 * t, -0.4 - 0.05 * t], axis=1)
        world = np.einsum("nij,nkj->nki", r_w.as_matrix(), local) + p_w[:, None]
        fields = {
            "position": world,
            "rotation": np.repeat(r_w.as_quat()[:, None], 25, axis=1),
            "hand_valid": np.ones(n, bool),
        }
        attrs = {"joint_set": "webxr25", "hand": side, "frame": "world"}
        streams.append(make_stream(f"hand_{side}", "hand_joints", ts, START_NS, fields, attrs))
        wrists[side], origins[side] = r_w, p_w
        if side == "right":
            head_offset = np.asarray([r["headPosition"] for r in records], np.float64) / 1000.0
            head = {
                "position": p_w + r_w.apply(head_offset),
                "rotation": np.asarray([r["headRotation"] for r in records], np.float64),
                "valid": np.ones(n, bool),
            }
            streams.append(make_stream("head", "pose", ts, START_NS, head, {"frame": "world"}))
    info = CaptureInfo("handy-poses", "webxr", "handy.js", START_NS)
    return Trajectory(info, tuple(streams)), wrists, origins


def test_handy_fingertips_come_back_as_recorded_and_are_hand_sized():
    trajectory, _, _ = _handy_trajectory()
    table = derive_actions(trajectory, FINGERTIPS)
    for h, side in enumerate(("left", "right")):
        recorded = np.asarray([r["digitTipPositions"] for r in _handy(side)], np.float64) / 1000
        got = table.state[:, 15 * h : 15 * (h + 1)].reshape(-1, 5, 3)
        assert np.abs(got - recorded).max() < 1e-6
        distances = np.linalg.norm(got, axis=2)
        assert distances.min() > 0.05 and distances.max() < 0.25


def test_handy_head_frame_wrist_and_gripper_from_the_recorded_poses():
    trajectory, wrists, _ = _handy_trajectory()
    table = derive_actions(trajectory, EEF)
    records = _handy("right")
    r_h = Rotation.from_quat([r["headRotation"] for r in records])
    offset = np.asarray([r["headPosition"] for r in records], np.float64) / 1000.0
    # p_head = R_h^T (p_w - t_h) with t_h = p_w + R_w offset: -R_h^T R_w offset
    expected = -r_h.inv().apply(wrists["right"].apply(offset))
    got = np.stack([_column(table, f"right.eef.{a}") for a in "xyz"], axis=1)
    assert np.abs(got - expected).max() < 1e-6
    reach = np.linalg.norm(got, axis=1)
    assert reach.min() > 0.2 and reach.max() < 0.9  # the hand within arm's reach of the head
    aperture = _column(table, "right.grasp_aperture")
    closed = _column(table, "right.gripper_closed")
    names = [r["names"][0] for r in records]
    assert closed[names.index("pinch")] == 1 and aperture[names.index("pinch")] < 0.01
    assert closed[names.index("flat")] == 0 and aperture[names.index("flat")] > 0.05
    assert (closed[aperture < 0.03] == 1).all() and (closed[aperture > 0.04] == 0).all()
    assert aperture.min() > 0.003 and aperture.max() < 0.15


def test_aria_wrist_normals_give_a_rotation_within_a_few_degrees_of_the_wrist_pose(tmp_path):
    trajectory = _aria(tmp_path / "aria-n", ("hand_tracking_results_v2.csv",))
    # the same rows without their wrist pose: a wrist_and_palm_poses_v2-like stream
    kept = []
    for s in trajectory.streams:
        if s.kind == "wrist_palm":
            fields = {k: v for k, v in s.fields.items() if k != "wrist_rotation"}
            kept.append(
                make_stream(
                    s.name, s.kind, s.timestamp_ns, trajectory.info.start_ns, fields, s.attrs
                )
            )
    normals = Trajectory(trajectory.info, tuple(kept))
    derived = derive_actions(normals, EEF)
    exact = derive_actions(trajectory, EEF)
    for side in ("left", "right"):
        components = derived.info["hands"][side]["components"]
        assert components["wrist_rotation"].startswith("approximate: derived from the wrist normal")
        assert components["fingertips"].startswith("absent")
        ok = derived.valid[side]
        assert ok.sum() == 3 and (ok == exact.valid[side]).all()
        names = [f"{side}.eef.rot6d_{k}" for k in range(6)]
        got = rot6d_to_matrix(np.stack([_column(derived, n) for n in names], axis=1)[ok])
        want = rot6d_to_matrix(np.stack([_column(exact, n) for n in names], axis=1)[ok])
        angle = np.degrees(
            (Rotation.from_matrix(got).inv() * Rotation.from_matrix(want)).magnitude()
        )
        assert angle.max() < 4.0  # 3.0-3.2 degrees on the sample
        assert np.isnan(_column(derived, f"{side}.grasp_aperture")).all()
