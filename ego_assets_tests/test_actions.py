"""Action spaces from the trajectory: values against analytic paths and scipy."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.spatial.transform import Rotation

from ego_assets.actions import ActionSpace, ActionSpaceError, derive_actions
from ego_assets.actions.derive import gripper_latch
from ego_assets.capture.egosmith_webdataset import rot6d_matrix as rot6d_to_matrix
from ego_assets.formats.egosmith_lowdim import rot6d
from ego_assets.trajectory.joints import FINGERTIPS
from ego_assets.trajectory.model import CaptureInfo, Trajectory
from ego_assets.trajectory.streams import make_stream

START_NS = 1_793_000_000_000_000_000
RATE_HZ = 30.0
N = 60
TIPS = FINGERTIPS["webxr25"]
# wrist-frame offsets of the five tips (m): thumb's x is set per sample by the aperture
TIP_OFFSETS = np.array(
    [[0.0, 0.0, -0.10], [0.0, 0.0, -0.12], [0.02, 0.0, -0.13], [0.04, 0.0, -0.12], [0.06, 0, -0.1]]
)


def _times(n: int = N) -> np.ndarray:
    return np.arange(n) / RATE_HZ


def head_path(t: np.ndarray) -> tuple[Rotation, np.ndarray]:
    """The head turns about a tilted axis while walking forward and bobbing (world)."""
    rot = Rotation.from_rotvec(np.stack([0.3 * np.sin(t), 0.8 * t, 0.1 * t], axis=1))
    pos = np.stack([0.5 * t, 1.6 + 0.05 * np.sin(4 * t), -0.3 * t], axis=1)
    return rot, pos


def wrist_path(t: np.ndarray, side: str) -> tuple[Rotation, np.ndarray]:
    """The wrist pose in the head frame: left and right follow different paths."""
    sign = -1.0 if side == "left" else 1.0
    pos = np.stack(
        [sign * (0.2 + 0.05 * t), -0.3 + 0.1 * np.sin(2 * t), -0.4 - 0.02 * t * (sign + 2)],
        axis=1,
    )
    rot = Rotation.from_rotvec(
        np.stack([0.4 + 0.2 * t, sign * 0.6 * t, 0.3 * sign + 0 * t], axis=1)
    )
    return rot, pos


def aperture_path(n: int, side: str) -> np.ndarray:
    """Thumb-to-index distance (m): down through 0.03, up through 0.04, with wobbles."""
    base = np.array(
        [0.06, 0.05, 0.035, 0.031, 0.029, 0.033, 0.038, 0.035, 0.039, 0.041, 0.036, 0.032, 0.02]
    )
    out = np.resize(base, n)
    return out if side == "right" else out[::-1].copy()


def _hand(side: str, ts: np.ndarray, aperture: np.ndarray, hand_valid: np.ndarray):
    t = (ts - START_NS) / 1e9
    r_h, p_h = head_path(t)
    r_hw, p_hw = wrist_path(t, side)
    r_w = r_h * r_hw
    p_w = r_h.apply(p_hw) + p_h
    n = len(ts)
    local = np.zeros((n, 25, 3))
    local[:, TIPS] = TIP_OFFSETS
    # index tip at (0, 0, -0.12), thumb tip at (a_x, 0, -0.12 + dz) so |thumb-index| = a
    local[:, TIPS[0]] = np.stack([aperture, np.zeros(n), np.full(n, -0.12)], axis=1)
    world = np.einsum("nij,nkj->nki", r_w.as_matrix(), local) + p_w[:, None]
    quat = np.repeat(r_w.as_quat()[:, None], 25, axis=1)
    fields = {
        "position": world,
        "rotation": quat,
        "joint_valid": np.ones((n, 25), bool),
        "hand_valid": hand_valid,
    }
    attrs = {"joint_set": "webxr25", "hand": side, "frame": "world"}
    return make_stream(f"hand_{side}", "hand_joints", ts, START_NS, fields, attrs)


def synthetic(
    n: int = N,
    untracked: dict[str, list[int]] | None = None,
    head_rows: np.ndarray | None = None,
) -> Trajectory:
    """Both hands at 30 Hz on a moving head (`head_path`), optionally some rows untracked
    and the head stream with only ``head_rows`` of its samples."""
    ts = START_NS + np.rint(_times(n) * 1e9).astype(np.int64)
    streams = []
    for side in ("left", "right"):
        valid = np.ones(n, bool)
        valid[(untracked or {}).get(side, [])] = False
        streams.append(_hand(side, ts, aperture_path(n, side), valid))
    rows = np.arange(n) if head_rows is None else head_rows
    r_h, p_h = head_path(_times(n)[rows])
    head = {"position": p_h, "rotation": r_h.as_quat(), "valid": np.ones(len(rows), bool)}
    streams.append(make_stream("head", "pose", ts[rows], START_NS, head, {"frame": "world"}))
    return Trajectory(CaptureInfo("synthetic-actions", "webxr", "test", START_NS), tuple(streams))


def column(table, name: str) -> np.ndarray:
    return table.state[:, table.state_names.index(name)].astype(np.float64)


def columns(table, names: list[str]) -> np.ndarray:
    return np.stack([column(table, n) for n in names], axis=1)


def angle_deg(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Angles between (N, 3, 3) rotation matrices, degrees."""
    return np.degrees((Rotation.from_matrix(a).inv() * Rotation.from_matrix(b)).magnitude())


EEF = ActionSpace(space="eef_pose_gripper", frame="head")


@pytest.mark.parametrize("side", ["left", "right"])
def test_head_frame_wrist_pose_is_the_analytic_one(side):
    table = derive_actions(synthetic(), EEF)
    assert table.sample_ns.tolist() == synthetic().stream("hand_right").timestamp_ns.tolist()
    r_hw, p_hw = wrist_path(_times(), side)
    position = columns(table, [f"{side}.eef.{a}" for a in "xyz"])
    assert np.abs(position - p_hw).max() < 1e-6
    six = columns(table, [f"{side}.eef.rot6d_{i}" for i in range(6)])
    assert angle_deg(rot6d_to_matrix(six), r_hw.as_matrix()).max() < 0.01
    # the six numbers are column 0 then column 1 of the matrix
    matrix = r_hw.as_matrix()
    assert np.abs(six - np.concatenate([matrix[:, :, 0], matrix[:, :, 1]], axis=1)).max() < 1e-6
    assert table.valid[side].all() and table.valid["action"][:-1].all()


def test_world_frame_wrist_pose_is_the_analytic_one():
    table = derive_actions(synthetic(), ActionSpace(space="eef_pose_gripper", frame="world"))
    r_h, p_h = head_path(_times())
    for side in ("left", "right"):
        r_hw, p_hw = wrist_path(_times(), side)
        position = columns(table, [f"{side}.eef.{a}" for a in "xyz"])
        assert np.abs(position - (r_h.apply(p_hw) + p_h)).max() < 1e-6
        six = columns(table, [f"{side}.eef.rot6d_{i}" for i in range(6)])
        assert angle_deg(rot6d_to_matrix(six), (r_h * r_hw).as_matrix()).max() < 0.01


def test_left_and_right_are_not_swapped():
    table = derive_actions(synthetic(), EEF)
    _, left = wrist_path(_times(), "left")
    _, right = wrist_path(_times(), "right")
    assert np.abs(column(table, "left.eef.x") - left[:, 0]).max() < 1e-6
    assert np.abs(column(table, "right.eef.x") - right[:, 0]).max() < 1e-6
    assert np.abs(left[:, 0] - right[:, 0]).min() > 0.3  # a swap could not pass


def test_xyzw_is_scipy_order_and_not_wxyz():
    table = derive_actions(synthetic(), ActionSpace(space="eef_pose_gripper", rotation="xyzw"))
    r_hw, _ = wrist_path(_times(), "right")
    quat = columns(table, ["right.eef.qx", "right.eef.qy", "right.eef.qz", "right.eef.qw"])
    expected = r_hw.as_quat(canonical=True)
    assert np.abs(quat - expected).max() < 1e-6
    assert np.abs(np.roll(expected, 1, axis=1) - expected).max() > 0.1  # wxyz would differ
    assert table.state_names[3:7] == ("left.eef.qx", "left.eef.qy", "left.eef.qz", "left.eef.qw")


def test_rot6d_round_trip_through_gram_schmidt():
    matrices = Rotation.random(200, random_state=3).as_matrix()
    assert np.abs(rot6d_to_matrix(rot6d(matrices)) - matrices).max() < 1e-12
    noisy = rot6d(matrices) + np.random.default_rng(3).normal(0, 1e-3, (200, 6))
    back = rot6d_to_matrix(noisy)
    assert np.abs(np.einsum("nji,njk->nik", back, back) - np.eye(3)).max() < 1e-12


def test_gripper_flips_exactly_at_the_crossings_and_does_not_chatter():
    a = np.array([0.06, 0.05, 0.035, 0.031, 0.029, 0.033, 0.038, 0.035, 0.039, 0.041, 0.036])
    assert gripper_latch(a, 0.03, 0.04).tolist() == [0, 0, 0, 0, 1, 1, 1, 1, 1, 0, 0]
    # starting closed (first aperture below close), a NaN keeps the latch and reads NaN
    b = np.array([0.02, 0.035, np.nan, 0.039, 0.045, np.nan, 0.02])
    out = gripper_latch(b, 0.03, 0.04)
    assert out[[0, 1, 3, 4, 6]].tolist() == [1, 1, 1, 0, 1]
    assert np.isnan(out[[2, 5]]).all()
    # starting between the thresholds: open until the first crossing
    assert gripper_latch(np.array([0.035, 0.031, 0.0295]), 0.03, 0.04).tolist() == [0, 0, 1]


def test_gripper_and_aperture_in_the_table_follow_each_hand():
    table = derive_actions(synthetic(), EEF)
    for side in ("left", "right"):
        aperture = aperture_path(N, side)
        assert np.abs(column(table, f"{side}.grasp_aperture") - aperture).max() < 1e-6
        expected = gripper_latch(aperture, 0.03, 0.04)
        assert column(table, f"{side}.gripper_closed").tolist() == expected.tolist()
        flips = np.flatnonzero(np.diff(expected)) + 1
        closes, opens = flips[expected[flips] == 1], flips[expected[flips] == 0]
        assert (aperture[closes] < 0.03).all() and (aperture[opens] > 0.04).all()
        assert len(closes) >= 4 and len(opens) >= 4
        between = (aperture >= 0.03) & (aperture <= 0.04)
        assert not set(flips) & set(np.flatnonzero(between))  # no chatter in the band
    spaced = derive_actions(
        synthetic(), ActionSpace.from_table({"space": "eef_pose_gripper", "gripper_close_m": 0.034})
    )
    # a close threshold alone keeps a 1 cm gap: 0.033 now closes, 0.041 does not open
    assert spaced.info["gripper"] == {
        **spaced.info["gripper"],
        "close_m": 0.034,
        "open_m": pytest.approx(0.044),
    }
    right = column(spaced, "right.gripper_closed")
    assert right[:6].tolist() == [0, 0, 0, 1, 1, 1] and right[9] == 1


def test_fingertips_are_in_the_wrist_frame():
    table = derive_actions(synthetic(), ActionSpace(space="fingertips"))
    assert table.state.shape == (N, 30)
    assert table.state_names[:3] == ("left.thumb_tip.x", "left.thumb_tip.y", "left.thumb_tip.z")
    tips = table.state[:, 15:].reshape(N, 5, 3)
    expected = np.repeat(TIP_OFFSETS[None], N, axis=0)
    expected[:, 0] = np.stack([aperture_path(N, "right"), np.zeros(N), np.full(N, -0.12)], 1)
    assert np.abs(tips - expected).max() < 1e-6


def test_absolute_actions_are_future_states_in_chunks_with_padding():
    space = ActionSpace(space="eef_pose_gripper", horizon=3)
    table = derive_actions(synthetic(), space)
    width = len(table.state_names)
    assert table.action.shape == (N, 3 * width)
    assert table.action_names[0] == "t+1.left.eef.x"
    assert table.action_names[width] == "t+2.left.eef.x"
    assert table.action_names[-1] == "t+3.right.gripper_closed"
    steps = table.action.reshape(N, 3, width)
    for k in (1, 2, 3):
        assert np.array_equal(steps[: N - k, k - 1], table.state[k:])
        assert np.array_equal(steps[N - k :, k - 1], np.repeat(table.state[-1:], k, axis=0))
    assert table.valid["action"].tolist() == [True] * (N - 3) + [False] * 3


def test_relative_actions_equal_hand_computed_deltas():
    space = ActionSpace(space="eef_pose_gripper", horizon=2, relative=True, frame="head")
    table = derive_actions(synthetic(), space)
    r_h, p_h = head_path(_times())
    r_hw, p_hw = wrist_path(_times(), "left")
    r_w, p_w = r_h * r_hw, r_h.apply(p_hw) + p_h
    names = table.action_names
    for k in (1, 2):
        t = np.arange(N - k)
        dp = r_w[t].inv().apply(p_w[t + k] - p_w[t])
        dr = (r_w[t].inv() * r_w[t + k]).as_matrix()
        got_p = table.action[t][:, [names.index(f"t+{k}.left.eef.d{a}") for a in "xyz"]]
        assert np.abs(got_p - dp).max() < 1e-6
        six = table.action[t][:, [names.index(f"t+{k}.left.eef.drot6d_{i}") for i in range(6)]]
        assert angle_deg(rot6d_to_matrix(six.astype(np.float64)), dr).max() < 0.01
        aperture = table.action[t, names.index(f"t+{k}.left.grasp_aperture")]
        assert np.abs(aperture - aperture_path(N, "left")[t + k]).max() < 1e-6
    # the same deltas whatever the frame of the state
    world = derive_actions(synthetic(), ActionSpace(**{**space.to_json(), "frame": "world"}))
    assert np.abs(world.action - table.action)[:-2].max() < 1e-6


def test_an_untracked_hand_is_nan_and_flagged_never_a_zero_pose():
    table = derive_actions(synthetic(untracked={"left": [5, 6, 7]}), EEF)
    left = [i for i, n in enumerate(table.state_names) if n.startswith("left.")]
    right = [i for i, n in enumerate(table.state_names) if n.startswith("right.")]
    assert np.isnan(table.state[5:8][:, left]).all()
    assert np.isfinite(table.state[5:8][:, right]).all()
    assert np.flatnonzero(~table.valid["left"]).tolist() == [5, 6, 7]
    assert table.valid["right"].all()
    assert np.flatnonzero(~table.valid["action"]).tolist() == [4, 5, 6, N - 1]
    # the latch ignores the untracked samples: it goes on from sample 4's state
    closed = column(table, "left.gripper_closed")
    assert closed[8] == gripper_latch(aperture_path(N, "left"), 0.03, 0.04)[8]


def test_a_stale_head_pose_invalidates_the_head_frame_only():
    rows = np.r_[0:20, 30:N]  # no head sample for 1/3 s after sample 19
    trajectory = synthetic(head_rows=rows)
    table = derive_actions(trajectory, EEF)
    age_ms = (np.arange(20, 30) - 19) / RATE_HZ * 1000
    stale = np.arange(20, 30)[age_ms > 250]
    assert stale.tolist() == [27, 28, 29]
    assert np.flatnonzero(~table.valid["right"]).tolist() == stale.tolist()
    assert np.isnan(table.state[stale]).all()
    # held (not stale) samples use the head pose of sample 19, as the hold says
    r_h, p_h = head_path(_times()[[19]])
    _, p_hw = wrist_path(_times(), "right")
    p_w = head_path(_times())[0].apply(p_hw) + head_path(_times())[1]
    expected = r_h.inv().apply(p_w[25] - p_h[0])
    got = columns(table, ["right.eef.x", "right.eef.y", "right.eef.z"])[25]
    assert np.abs(got - expected).max() < 1e-6
    world = derive_actions(trajectory, ActionSpace(space="eef_pose_gripper", frame="world"))
    assert world.valid["right"].all()


def test_dominant_hand_is_the_one_tracked_more_and_named_dominant():
    table = derive_actions(
        synthetic(untracked={"right": list(range(10))}),
        ActionSpace(space="eef_pose_gripper", hands="dominant"),
    )
    assert table.info["dominant"]["hand"] == "left"
    assert "more samples (50 right, 60 left" in table.info["dominant"]["rule"]
    assert table.state_names[0] == "dominant.eef.x"
    _, left = wrist_path(_times(), "left")
    assert np.abs(column(table, "dominant.eef.x") - left[:, 0]).max() < 1e-6
    assert table.valid["dominant"] is table.valid["left"]


def test_a_declared_fps_resamples_by_hold():
    table = derive_actions(synthetic(), ActionSpace(space="eef_pose_gripper", fps=12.0))
    step = np.diff(table.sample_ns)
    assert set(step.tolist()) <= {83_333_333, 83_333_334}
    source = synthetic().stream("hand_right").timestamp_ns
    assert table.sample_ns[0] == source[0] and table.sample_ns[-1] <= source[-1]
    held = np.searchsorted(source, table.sample_ns, side="right") - 1
    _, p_hw = wrist_path(_times(), "right")
    assert np.abs(column(table, "right.eef.x") - p_hw[held, 0]).max() < 1e-6


def test_source_space_derives_nothing():
    with pytest.raises(ActionSpaceError, match="space"):
        derive_actions(synthetic(), ActionSpace())


@pytest.mark.parametrize(
    ("table", "key"),
    [
        ({"spaces": "fingertips"}, "spaces"),
        ({"space": "joints"}, "space"),
        ({"frame": "camera"}, "frame"),
        ({"hands": "two"}, "hands"),
        ({"rotation": "wxyz"}, "rotation"),
        ({"horizon": 0}, "horizon"),
        ({"horizon": 1.5}, "horizon"),
        ({"horizon": True}, "horizon"),
        ({"relative": "yes"}, "relative"),
        ({"gripper_close_m": -0.01}, "gripper_close_m"),
        ({"gripper_close_m": "3cm"}, "gripper_close_m"),
        ({"gripper_open_m": 0.02}, "gripper_open_m"),
        ({"fps": 0}, "fps"),
        ({"fps": float("nan")}, "fps"),
    ],
)
def test_from_table_refuses_bad_keys_and_values_naming_the_key(table, key):
    with pytest.raises(ActionSpaceError) as caught:
        ActionSpace.from_table(table)
    assert caught.value.key == key
    assert str(caught.value).startswith(f"{key}: ")


def test_from_table_round_trips_through_json():
    space = ActionSpace.from_table(
        {"space": "eef_pose_gripper", "frame": "world", "horizon": 4, "gripper_close_m": 0.02}
    )
    assert space.gripper_open_m == pytest.approx(0.03)
    assert ActionSpace.from_table(space.to_json()) == space
    assert space.describe() == (
        "eef_pose_gripper: wrist pose in the world frame (rot6d) + grasp aperture + gripper "
        "(closed < 0.02 m, open > 0.03 m); hands both; actions t+1..t+4 absolute; "
        "the packing's clock"
    )


def test_names_depend_only_on_the_space_and_declare_the_convention():
    space = ActionSpace(
        space="eef_pose_gripper", rotation="xyzw", relative=True, horizon=2, hands="right"
    )
    eef = ("x", "y", "z", "qx", "qy", "qz", "qw")
    assert space.state_names() == (
        *(f"right.eef.{c}" for c in eef),
        "right.grasp_aperture",
        "right.gripper_closed",
    )
    step = (*(f"right.eef.d{c}" for c in eef), "right.grasp_aperture", "right.gripper_closed")
    assert space.action_names() == tuple(f"t+{k}.{c}" for k in (1, 2) for c in step)
    table = derive_actions(synthetic(), space)
    assert (table.state_names, table.action_names) == (space.state_names(), space.action_names())
    assert set(table.valid) == {"right", "action"}
    tips = ActionSpace(space="fingertips", relative=True, hands="dominant")
    assert tips.action_names()[:4] == (
        "t+1.dominant.thumb_tip.dx",
        "t+1.dominant.thumb_tip.dy",
        "t+1.dominant.thumb_tip.dz",
        "t+1.dominant.index_tip.dx",
    )
    assert ActionSpace().state_names() == () == ActionSpace().action_names()


def test_an_episode_without_hand_or_head_streams_gives_an_empty_table():
    info = CaptureInfo("empty", "webxr", "test", START_NS)
    space = ActionSpace(space="eef_pose_gripper", horizon=2)
    table = derive_actions(Trajectory(info, ()), space)
    assert table.state.shape == (0, 22) and table.action.shape == (0, 44)
    assert table.info["clock"].startswith("none: the Holos rule finds no hand skeleton")
    # on a clock of its own, a capture without hands is all NaN and invalid
    ts = START_NS + np.arange(3, dtype=np.int64)
    table = derive_actions(Trajectory(info, ()), space, sample_ns=ts)
    assert np.isnan(table.state).all() and not table.valid["left"].any()
    assert table.info["hands"]["left"]["components"]["wrist_position"].startswith("absent")


def test_no_head_pose_refuses_the_head_frame_naming_the_capture():
    headless = synthetic()
    headless = Trajectory(headless.info, tuple(s for s in headless.streams if s.name != "head"))
    with pytest.raises(ActionSpaceError) as caught:
        derive_actions(headless, EEF)
    assert caught.value.key == "frame"
    assert caught.value.message.startswith("capture 'synthetic-actions': no head pose")
    world = derive_actions(headless, ActionSpace(space="eef_pose_gripper", frame="world"))
    assert world.valid["left"].all()
