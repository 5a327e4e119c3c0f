import json

import numpy as np
import pytest

from ego_assets.fixtures import real_fixture
from ego_assets.trajectory import joints

HANDY = real_fixture("handy_js")


def _quest_poses(side: str) -> np.ndarray:
    records = json.loads((HANDY / f"handy_poses_{side}.json").read_text())
    return np.asarray([r["jointPositions"] for r in records], dtype=np.float64) / 1000.0


def test_joint_set_sizes_match_the_sources():
    sizes = {name: len(names) for name, names in joints.JOINT_SETS.items()}
    assert sizes == {
        "webxr25": 25,
        "arkit27": 27,
        "vision21": 21,
        "mediapipe21": 21,
        "aria21": 21,
        "mano16": 16,
        "mano21": 21,
    }
    assert joints.ARKIT27[25:] == ("forearmWrist", "forearmArm")
    assert joints.ARIA21[5] == "wrist" and joints.ARIA21[20] == "palm_center"
    assert joints.WEBXR25[24] == "pinky-finger-tip"


def test_every_pair_of_point_sets_has_a_map():
    for source in joints.JOINT_SETS:
        for target in joints.JOINT_SETS:
            if "mano16" in (source, target) and source != target:
                continue
            m = joints.joint_map(source, target)
            assert len(m.index) == len(joints.JOINT_SETS[target])


def test_arkit_webxr_round_trip_is_exact_on_the_25_shared_joints():
    rng = np.random.default_rng(0)
    arkit = rng.normal(size=(7, 27, 7))
    webxr, present = joints.joint_map("arkit27", "webxr25").apply(arkit)
    assert present.all()
    back, present_back = joints.joint_map("webxr25", "arkit27").apply(webxr)
    np.testing.assert_array_equal(back[:, :25], arkit[:, :25])
    assert np.isnan(back[:, 25:]).all()
    assert list(present_back) == [True] * 25 + [False, False]


def test_webxr_to_arkit_to_webxr_is_lossless():
    rng = np.random.default_rng(1)
    webxr = rng.normal(size=(4, 25, 8))
    arkit, _ = joints.joint_map("webxr25", "arkit27").apply(webxr)
    back, _ = joints.joint_map("arkit27", "webxr25").apply(arkit)
    np.testing.assert_array_equal(back, webxr)


@pytest.mark.parametrize("pair", [("mano21", "mediapipe21"), ("vision21", "mediapipe21")])
def test_reorderings_round_trip_exactly(pair):
    source, target = pair
    values = np.arange(21 * 3, dtype=float).reshape(21, 3)
    there, _ = joints.joint_map(source, target).apply(values)
    back, _ = joints.joint_map(target, source).apply(there)
    np.testing.assert_array_equal(back, values)


def test_maps_state_what_they_lose():
    m = joints.joint_map("webxr25", "mediapipe21")
    assert set(m.dropped) == {
        "index-finger-metacarpal",
        "middle-finger-metacarpal",
        "ring-finger-metacarpal",
        "pinky-finger-metacarpal",
    }
    assert any("metacarpal" in text for text in m.lost)
    aria = joints.joint_map("aria21", "mediapipe21")
    assert aria.missing == ("THUMB_CMC",) and aria.dropped == ("palm_center",)
    chained = joints.joint_map("arkit27", "aria21")
    assert chained.missing == ("palm_center",)
    assert any("forearm" in text for text in chained.lost)


def test_aria_to_mediapipe_places_the_wrist_and_tips():
    aria = np.zeros((21, 3))
    aria[:, 0] = np.arange(21)
    mp, present = joints.map_positions(aria, "aria21", "mediapipe21")
    assert mp[0, 0] == 5  # WRIST <- aria wrist
    assert mp[4, 0] == 0 and mp[8, 0] == 1 and mp[20, 0] == 4  # tips
    assert np.isnan(mp[1]).all() and not present[1]


@pytest.mark.parametrize("side", ["left", "right"])
def test_recorded_quest_poses_keep_their_bone_lengths_through_arkit(side):
    poses = _quest_poses(side)
    assert poses.shape == (55, 25, 3)
    lengths = joints.bone_lengths(poses, "webxr25")
    arkit, _ = joints.map_positions(poses, "webxr25", "arkit27")
    arkit_lengths = joints.bone_lengths(arkit, "arkit27")
    np.testing.assert_array_equal(arkit_lengths[:, :24], lengths)
    # Quest's palm is rigid: metacarpal and proximal bones never vary across the 55 poses.
    rigid = [joints.bones("webxr25").index((0, j)) for j in (5, 10, 15, 20)]
    assert np.ptp(lengths[:, rigid], axis=0).max() < 1e-12
    # The index proximal phalanx of the recorded right hand is a few centimetres long.
    proximal = joints.bones("webxr25").index((6, 7))
    assert 0.015 < np.median(lengths[:, proximal]) < 0.05


def test_mediapipe_bone_lengths_after_mapping_equal_the_webxr_ones():
    poses = _quest_poses("right")
    mp, _ = joints.map_positions(poses, "webxr25", "mediapipe21")
    mp_lengths = joints.bone_lengths(mp, "mediapipe21")
    wx = joints.bone_lengths(poses, "webxr25")
    # thumb bones are the same points in both sets
    for a, b in ((1, 2), (2, 3), (3, 4)):
        i_mp = joints.bones("mediapipe21").index((a, b))
        i_wx = joints.bones("webxr25").index((a, b))
        np.testing.assert_array_equal(mp_lengths[:, i_mp], wx[:, i_wx])
