"""Plausibility metrics: each fires on its synthetic fault and is quiet on real Quest poses."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from scipy.spatial.transform import Rotation

from ego_assets.capture import read_capture
from ego_assets.fixtures import real_fixture
from ego_assets.quality.report import compute_report
from ego_assets.synth import synthesize
from ego_assets.synth.motion import JOINT_RADII_M, local_orientations
from ego_assets.trajectory.model import CaptureInfo, Trajectory
from ego_assets.trajectory.streams import make_stream

START_NS = 1_700_000_000_000_000_000

# (kind, fault, metric that must leave "pass", verdict it gets)
FAULT_CASES = (
    ("webxr", "quaternion_wxyz", "hand:left/rotation_axis_error_deg", "fail"),
    ("webxr", "swapped_hands", "hand:left/chirality_mismatch_ratio", "fail"),
    ("holos-iphone", "swapped_hands", "hand:right/chirality_mismatch_ratio", "fail"),
    ("webxr", "negative_radius", "stream:hand_left/out_of_domain_ratio", "fail"),
    ("webxr", "pinch_strength", "hand:right/pinch_distance_error_m", "fail"),
    ("holos-iphone", "teleport", "hand:left/teleport_count", "warn"),
    ("webxr", "teleport", "hand:right/teleport_count", "warn"),
)
PLAUSIBILITY = (
    "rotation_axis_error_deg",
    "chirality_mismatch_ratio",
    "pinch_distance_error_m",
    "teleport_count",
)


def _report(tmp_path: Path, kind: str, faults: tuple[str, ...] = ()):
    folder = tmp_path / "capture"
    synthesize(kind, folder, seconds=2.0, seed=5, faults=faults)
    return compute_report(read_capture("capture", folder))


@pytest.mark.parametrize(("kind", "fault", "key", "status"), FAULT_CASES)
def test_each_plausibility_fault_trips_its_metric(tmp_path, kind, fault, key, status) -> None:
    scope, name = key.rsplit("/", 1)
    clean = _report(tmp_path / "clean", kind)
    faulty = _report(tmp_path / "faulty", kind, (fault,))
    assert faulty.metric(scope, name).status == status
    assert all(m.status == "pass" for m in clean.metrics if m.name == name)


def test_teleport_at_15_hz_the_old_30_hz_window_missed(tmp_path) -> None:
    report = _report(tmp_path, "holos-iphone", ("teleport",))
    hand = report.hand("left")
    assert hand.teleport_count == 1
    # 12 cm in one 67 ms step is 1.8 m/s: under the 3 m/s speed rule on its own
    assert hand.wrist_speed_max_mps < 3.0


def _quest_poses(side: str) -> np.ndarray:
    records = json.loads((real_fixture("handy_js") / f"handy_poses_{side}.json").read_text())
    return np.asarray([r["jointPositions"] for r in records], np.float64) / 1000.0


def _quest_trajectory() -> Trajectory:
    """The 55 + 55 recorded Quest poses as a 30 Hz WebXR-like episode: each hand moves
    its wrist smoothly through space (0.6 m/s) while cycling through its real poses."""
    streams = []
    pinch = {}
    for side in ("left", "right"):
        local = np.concatenate([_quest_poses(side)] * 3)  # 165 samples, 5.5 s
        n = len(local)
        t = np.arange(n) / 30.0
        wrist_rot = Rotation.from_rotvec(np.stack([0.3 * np.sin(t), 0.2 * t, 0 * t], axis=1))
        wrist_pos = np.stack([0.2 * np.cos(3 * t), 1.3 + 0.1 * np.sin(t), -0.4 + 0 * t], axis=1)
        world = np.einsum("tij,tkj->tki", wrist_rot.as_matrix(), local) + wrist_pos[:, None]
        q_local = local_orientations(local).reshape(-1, 4)
        q = (
            Rotation.from_quat(np.repeat(wrist_rot.as_quat(), 25, axis=0))
            * Rotation.from_quat(q_local)
        ).as_quat()
        ts = START_NS + np.rint(t * 1e9).astype(np.int64)
        fields = {
            "position": world,
            "rotation": q.reshape(n, 25, 4),
            "radius": np.tile(JOINT_RADII_M, (n, 1)),
            "joint_valid": np.ones((n, 25), bool),
            "hand_valid": np.ones(n, bool),
        }
        attrs = {"joint_set": "webxr25", "hand": side, "frame": "world", "nominal_rate_hz": 30.0}
        streams.append(make_stream(f"hand_{side}", "hand_joints", ts, START_NS, fields, attrs))
        pinch[side] = np.linalg.norm(world[:, 4] - world[:, 9], axis=1)
    pinch_stream = make_stream("pinch", "pinch", ts, START_NS, pinch, {})
    info = CaptureInfo("quest-poses", "webxr", "handy.js", START_NS)
    return Trajectory(info, (*streams, pinch_stream))


@pytest.mark.filterwarnings("error::RuntimeWarning")  # no "invalid value in divide" (synth/motion)
def test_every_plausibility_metric_is_quiet_on_the_real_quest_poses() -> None:
    report = compute_report(_quest_trajectory())
    for hand in report.hands:
        assert hand.chirality_mismatch_ratio == 0.0
        assert hand.rotation_axis_error_deg < 1.0
        assert hand.pinch_distance_error_m == pytest.approx(0.0, abs=1e-12)
        assert hand.teleport_count == 0
    assert {s.out_of_domain_ratio for s in report.streams if s.kind == "hand_joints"} == {0.0}
    for m in report.metrics:
        if m.name in (*PLAUSIBILITY, "out_of_domain_ratio"):
            assert m.status == "pass", m


def test_real_quest_poses_of_the_other_hand_are_caught() -> None:
    swapped = _quest_trajectory()
    streams = tuple(
        s if s.kind != "hand_joints" else type(s)(
            s.name, s.kind, s.timestamp_ns, s.time, s.fields,
            {**s.attrs, "hand": "right" if s.attrs["hand"] == "left" else "left"}, s.flags,
        )
        for s in swapped.streams
    )  # fmt: skip
    report = compute_report(Trajectory(swapped.info, streams))
    assert [h.chirality_mismatch_ratio for h in report.hands] == [1.0, 1.0]


def test_hand_centred_landmarks_skip_motion_figures_and_say_why(tmp_path) -> None:
    folder = tmp_path / "capture"
    synthesize("holos-iphone", folder, seconds=2.0, seed=5)
    meta = json.loads((folder / "metadata.json").read_text())
    meta["landmarks_3d_frame"] = "hand"
    (folder / "metadata.json").write_text(json.dumps(meta))
    trajectory = read_capture("capture", folder)
    assert trajectory.stream("hand_left_landmarks_3d").attrs["frame"] == "hand"
    report = compute_report(trajectory)
    hand = report.hand("left")
    assert np.isnan(hand.wrist_speed_p99_mps) and np.isnan(hand.jitter_mps3)
    assert hand.skipped[0] == (
        "wrist_speed_p99_mps: positions are in the hand-centred frame 'hand', not a world frame"
    )
    names = {m.name for m in report.metrics if m.scope == "hand:left"}
    assert not names & {"wrist_speed_p99_mps", "teleport_count", "jitter_mps3"}
    assert "chirality_mismatch_ratio" in names  # geometry within the hand still counts
