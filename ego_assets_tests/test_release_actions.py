"""A release's declared action space (``[actions]``) in every packing, checked with values.

The data root of `test_releases` (two clean WebXR captures, one Vision Pro capture, a
blocked one) is released as ``eef`` (``eef_pose_gripper`` in the head frame, every
format). Each packing's vectors are compared with `derive_actions` on that packing's
own frame timestamps, and one frame's head-frame wrist position with the one computed
here by hand from the trajectory's head and hand streams.
"""

import json
import shutil
from pathlib import Path

import h5py
import numpy as np
import pyarrow.parquet as pq
import pytest
import webdataset as wds
from scipy.spatial.transform import Rotation

from ego_assets.actions import ActionSpace, derive_actions
from ego_assets.actions.sources import HEAD_AXES
from ego_assets.cli import main
from ego_assets.releases.build import build_release
from ego_assets.releases.derived import ceres_sample_ns
from ego_assets.releases.spec import SpecError, parse_spec
from ego_assets.trajectory.store import read_trajectory
from ego_assets_tests.other_venvs import ROBOMIMIC_PYTHON, lerobot_python, run_recipe, venv_env
from ego_assets_tests.test_releases import _tree, _write_spec, make_release_root

ALL = """
[release]
licence = "CC-BY-4.0"
formats = ["webdataset", "robomimic", "lerobot"]
[split]
seed = 3
fractions = { train = 1.0 }
"""
EEF = ALL + '\n[actions]\nspace = "eef_pose_gripper"\nframe = "head"\n'
SPACE = ActionSpace(space="eef_pose_gripper", frame="head")


@pytest.fixture(scope="module")
def built_root(tmp_path_factory) -> Path:
    return make_release_root(tmp_path_factory.mktemp("actions-root"))


@pytest.fixture(scope="module")
def eef(built_root):
    _write_spec(built_root, "eef", EEF)
    return build_release(built_root, "eef")


def _trajectory(root: Path, key: str):
    return read_trajectory(root / "trajectory" / key)


def _same(a, b, atol=0.0):
    """Equal values, NaN where the other is NaN."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    assert a.shape == b.shape
    assert (np.isnan(a) == np.isnan(b)).all()
    np.testing.assert_allclose(np.nan_to_num(a), np.nan_to_num(b), rtol=0, atol=atol)


def _held(ts: np.ndarray, at: int) -> int:
    return int(np.searchsorted(ts, at, side="right") - 1)


# -- the spec ---------------------------------------------------------------------------


def test_spec_actions_table_parses_and_source_keeps_the_json_of_before():
    spec = parse_spec({"release": {"licence": "x"}, "actions": {"space": "fingertips"}}, "r")
    assert spec.actions == ActionSpace(space="fingertips")
    assert spec.to_json()["actions"]["space"] == "fingertips"
    bare = parse_spec({"release": {"licence": "x"}}, "r")
    source = parse_spec({"release": {"licence": "x"}, "actions": {"space": "source"}}, "r")
    assert bare.actions == source.actions == ActionSpace()
    assert "actions" not in bare.to_json() and bare.to_json() == source.to_json()


@pytest.mark.parametrize(
    ("actions", "key"),
    [
        ({"space": "joints"}, "actions.space"),
        ({"frame": "camera"}, "actions.frame"),
        ({"horizon": 0}, "actions.horizon"),
        ({"gripper_close_m": -1}, "actions.gripper_close_m"),
        ({"spaces": "source"}, "actions.spaces"),
    ],
)
def test_spec_refuses_a_bad_actions_key_naming_file_and_key(actions, key):
    with pytest.raises(SpecError) as err:
        parse_spec({"release": {"licence": "x"}, "actions": actions}, "r", where="r.toml")
    assert str(err.value).startswith(f"r.toml: {key}: ")
    assert "\n" not in str(err.value)


def test_a_source_space_release_has_the_bytes_of_one_without_the_table(built_root, tmp_path):
    roots = []
    for name, extra in (("plain", ""), ("declared", '\n[actions]\nspace = "source"\n')):
        root = tmp_path / name
        shutil.copytree(built_root, root)
        _write_spec(root, "xr", ALL + extra)
        roots.append(build_release(root, "xr"))
    plain, declared = roots
    assert plain.manifest["inputs_sha256"] == declared.manifest["inputs_sha256"]
    assert "actions" not in plain.manifest and "actions" not in plain.manifest["spec"]
    assert _tree(plain.path) == _tree(declared.path)


# -- LeRobot ----------------------------------------------------------------------------


def test_lerobot_state_and_action_are_the_derived_vectors_of_each_frame(eef, built_root):
    dataset = eef.path / "lerobot" / "train"
    info = json.loads((dataset / "meta" / "info.json").read_text())
    state_feature, action_feature = (
        info["features"]["observation.state"],
        info["features"]["action"],
    )
    assert state_feature["names"][:3] == ["left.eef.x", "left.eef.y", "left.eef.z"]
    assert state_feature["names"][-1] == "right.gripper_closed"
    assert state_feature["shape"] == [22] and action_feature["shape"] == [22]
    assert action_feature["names"][0] == "t+1.left.eef.x"
    rows = pq.read_table(dataset / "data" / "chunk-000" / "file-000.parquet")
    episodes = pq.read_table(dataset / "meta" / "episodes" / "chunk-000" / "file-000.parquet")
    states, actions = [], []
    for key, index in eef.manifest["formats"]["lerobot"]["episodes"].items():
        meta = episodes.slice(index, 1).to_pylist()[0]
        start, end = meta["dataset_from_index"], meta["dataset_to_index"]
        mine = rows.slice(start, end - start)
        trajectory = _trajectory(built_root, key)
        slots = None
        if trajectory.has_stream("recorder_slots"):
            stream = trajectory.stream("recorder_slots")
            slots = (stream.fields["slot_index"], stream.timestamp_ns)
        ns = ceres_sample_ns(trajectory.info.start_ns, slots, mine)
        table = derive_actions(trajectory, SPACE, ns)
        state = np.array(mine.column("observation.state").to_pylist())
        action = np.array(mine.column("action").to_pylist())
        _same(state, table.state)
        _same(action, table.action)
        states.append(state)
        actions.append(action)
        # per-episode stats, NaN left out
        np.testing.assert_allclose(
            meta["stats/observation.state/mean"], np.nanmean(state, axis=0), rtol=1e-6
        )
        assert meta["stats/observation.state/count"] == [end - start]
    stats = json.loads((dataset / "meta" / "stats.json").read_text())
    every = np.concatenate(states)
    np.testing.assert_allclose(stats["observation.state"]["mean"], np.nanmean(every, 0), rtol=1e-6)
    np.testing.assert_allclose(stats["observation.state"]["min"], np.nanmin(every, 0), rtol=1e-6)
    np.testing.assert_allclose(stats["action"]["max"], np.nanmax(np.concatenate(actions), 0))
    # everything else as the merge writes it: the CERES columns of the shard
    assert rows.column("ceres.source_frame_index").num_chunks >= 1
    assert info["total_frames"] == rows.num_rows == every.shape[0]


def test_lerobot_head_frame_wrist_equals_one_computed_by_hand(eef, built_root):
    """Frame 10 of a WebXR episode: ``p_head = R_head^T (p_wrist - t_head)``."""
    key = "rel-xr-a"
    dataset = eef.path / "lerobot" / "train"
    index = eef.manifest["formats"]["lerobot"]["episodes"][key]
    episodes = pq.read_table(dataset / "meta" / "episodes" / "chunk-000" / "file-000.parquet")
    start = episodes.slice(index, 1).to_pylist()[0]["dataset_from_index"]
    rows = pq.read_table(dataset / "data" / "chunk-000" / "file-000.parquet")
    row = rows.slice(start + 10, 1)
    state = np.array(row.column("observation.state").to_pylist()[0])
    trajectory = _trajectory(built_root, key)
    slot = row.column("ceres.source_frame_index").to_pylist()[0]
    slots = trajectory.stream("recorder_slots")
    ns = int(slots.timestamp_ns[list(slots.fields["slot_index"]).index(slot)])
    head = trajectory.stream("head")
    h = _held(head.timestamp_ns, ns)
    rotation = Rotation.from_quat(head.fields["rotation"][h])
    for side, offset in (("left", 0), ("right", 11)):
        hand = trajectory.stream(f"hand_{side}")
        j = _held(hand.timestamp_ns, ns)
        wrist = hand.fields["position"][j, 0]
        expected = rotation.inv().apply(wrist - head.fields["position"][h])
        np.testing.assert_allclose(state[offset : offset + 3], expected, atol=1e-6)
        # rot6d: the first two columns of R_head^T R_wrist
        matrix = (rotation.inv() * Rotation.from_quat(hand.fields["rotation"][j, 0])).as_matrix()
        six = np.concatenate([matrix[:, 0], matrix[:, 1]])
        np.testing.assert_allclose(state[offset + 3 : offset + 9], six, atol=1e-6)


LEROBOT_RECIPE = r"""
import json, sys
from lerobot.datasets.lerobot_dataset import LeRobotDataset
ds = LeRobotDataset("release/eef", root=sys.argv[1], video_backend="torchcodec")
item = ds[int(sys.argv[2])]
print(json.dumps({
    "state": item["observation.state"].numpy().tolist(),
    "action": item["action"].numpy().tolist(),
    "names": ds.meta.features["observation.state"]["names"],
}))
"""


def test_lerobot_dataset_opens_the_derived_packing(eef, tmp_path):
    python = lerobot_python()
    if python is None:
        pytest.skip("no lerobot environment (make lerobot-env)")
    dataset = eef.path / "lerobot" / "train"
    rows = pq.read_table(dataset / "data" / "chunk-000" / "file-000.parquet")
    line = run_recipe(
        python,
        ["-c", LEROBOT_RECIPE, str(dataset), "70"],
        cwd=tmp_path,
        env=venv_env(hf_home=tmp_path),
        timeout_s=900,
    )
    got = json.loads(line)
    _same(got["state"], rows.column("observation.state").to_pylist()[70], atol=1e-7)
    _same(got["action"], rows.column("action").to_pylist()[70], atol=1e-7)
    assert got["names"][9:11] == ["left.grasp_aperture", "left.gripper_closed"]


# -- robomimic --------------------------------------------------------------------------


def test_robomimic_obs_and_actions_are_derived_on_the_demo_clock(eef, built_root):
    packed = eef.manifest["formats"]["robomimic"]
    with h5py.File(eef.path / "robomimic" / "release.hdf5") as f:
        described = json.loads(f["data"].attrs["ego_actions"])
        assert described["space"]["space"] == "eef_pose_gripper"
        for key, name in packed["demos"].items():
            demo = f[f"data/{name}"]
            table = derive_actions(_trajectory(built_root, key), SPACE, demo["timestamp_ns"][...])
            names = list(table.state_names)
            left = [names.index(f"left.eef.{c}") for c in ("x", "y", "z")]
            _same(demo["obs/eef_pose_left"][:, :3], table.state[:, left])
            right = names.index("right.grasp_aperture")
            _same(demo["obs/grasp_aperture_right"][:, 0], table.state[:, right])
            _same(demo["next_obs/eef_pose_left"][:-1], demo["obs/eef_pose_left"][1:])
            _same(demo["actions"][...], table.action)
            assert [s.decode() for s in demo["action_component"][...]] == list(table.action_names)
            assert described["obs"]["eef_pose_left"][0] == "left.eef.x"
            assert described["obs"]["gripper_closed_right"] == ["right.gripper_closed"]
            assert demo.attrs["num_samples"] == len(table.sample_ns)
            # the episode's own obs through the links, the episode file unchanged
            with h5py.File(eef.path / "robomimic" / "episodes" / f"{key}.hdf5") as src:
                np.testing.assert_array_equal(
                    demo["obs/device_pose"][...], src["data/demo_0/obs/device_pose"][...]
                )
                np.testing.assert_array_equal(
                    demo["source_actions"][...], src["data/demo_0/actions"][...]
                )
    for episode in eef.manifest["episodes"]:
        export = built_root / episode["exports"]["holos_hdf5"]["path"]
        linked = eef.path / "robomimic" / "episodes" / f"{episode['capture_key']}.hdf5"
        assert linked.read_bytes() == export.read_bytes()


SEQUENCE_RECIPE = r"""
import json, sys
import numpy as np
from robomimic.utils.dataset import SequenceDataset
ds = SequenceDataset(
    hdf5_path=sys.argv[1],
    obs_keys=["eef_pose_left", "gripper_closed_right"],
    dataset_keys=["actions"],
    seq_length=4,
    filter_by_attribute="train",
)
item = ds[0]
print(json.dumps({
    "len": len(ds),
    "eef": np.asarray(item["obs"]["eef_pose_left"], dtype=float).tolist(),
    "actions": np.asarray(item["actions"], dtype=float).tolist(),
}))
"""


def test_robomimic_sequence_dataset_reads_the_derived_obs(eef, tmp_path):
    path = eef.path / "robomimic" / "release.hdf5"
    line = run_recipe(
        ROBOMIMIC_PYTHON,
        ["-c", SEQUENCE_RECIPE, str(path)],
        cwd=tmp_path,
        env=venv_env(),
        timeout_s=600,
    )
    got = json.loads(line)
    with h5py.File(path) as f:
        assert got["len"] == int(f["data"].attrs["total"])
        _same(np.array(got["eef"], dtype=float), f["data/demo_0/obs/eef_pose_left"][:4])
        _same(np.array(got["actions"], dtype=float), f["data/demo_0/actions"][:4])


# -- WebDataset -------------------------------------------------------------------------


def test_webdataset_samples_carry_state_and_action_named_in_the_index(eef, built_root):
    folder = eef.path / "webdataset"
    index = json.loads((folder / "index.json").read_text())
    actions = index["actions"]
    assert actions["state_names"][0] == "left.eef.x" and actions["valid_names"][-1] == "action"
    assert actions["space"]["frame"] == "head"
    urls = [str(folder / p) for p in index["splits"]["train"]["shards"]]
    by_capture: dict[str, list[dict]] = {}
    for sample in wds.WebDataset(urls, shardshuffle=False, empty_check=False).decode():
        by_capture.setdefault(sample["meta.json"]["capture_id"], []).append(sample)
    assert sum(len(v) for v in by_capture.values()) == index["samples"]
    for key, samples in by_capture.items():
        ns = np.array([s["meta.json"]["timestamp_ns"] for s in samples], dtype=np.int64)
        table = derive_actions(_trajectory(built_root, key), SPACE, ns)
        _same(np.stack([s["state.npy"] for s in samples]), table.state)
        _same(np.stack([s["action.npy"] for s in samples]), table.action)
        valid = np.stack([s["valid.npy"] for s in samples])
        np.testing.assert_array_equal(valid[:, 0], table.valid["left"])
        np.testing.assert_array_equal(valid[:, 2], table.valid["action"])
        assert samples[0]["lowdim.npy"].shape == (116,)  # the episode's own members as before


# -- card, release.json, diff ------------------------------------------------------------


def test_card_and_manifest_state_the_space(eef):
    actions = eef.manifest["actions"]
    assert actions["space"] == SPACE.to_json()
    assert eef.manifest["spec"]["actions"] == SPACE.to_json()
    assert len(actions["state_names"]) == 22 and actions["action_names"][0] == "t+1.left.eef.x"
    webxr = actions["sources"]["joint_sets"]["webxr25"]
    assert webxr["hands"] == 4 and webxr["components"]["wrist_rotation"].startswith("exact")
    card = (eef.path / "README.md").read_text()
    assert "## State and actions" in card
    assert '| frame | "head" |' in card and "| horizon | 1 |" in card
    assert "| gripper_close_m | 0.03 |" in card and "rot6d, the first two columns" in card
    assert "| webxr25 | 4 | wrist_position | exact:" in card
    # one head-frame convention for the release, whatever each capture's head pose was
    assert actions["sources"]["frame_axes"] == [HEAD_AXES]
    axes_lines = [line for line in card.splitlines() if line.startswith("Frame axes:")]
    assert axes_lines == [f"Frame axes: {HEAD_AXES}."]
    assert actions["sources"]["head_axes_from"]
    for how in actions["sources"]["head_axes_from"]:
        assert f"Head pose from {how}." in card


def test_changing_the_space_makes_a_new_version_and_diff_says_so(built_root, tmp_path, capsys):
    root = tmp_path / "data"
    shutil.copytree(built_root, root)
    _write_spec(root, "xr", ALL)
    v1 = build_release(root, "xr")
    _write_spec(root, "xr", ALL + '\n[actions]\nspace = "fingertips"\nhorizon = 2\n')
    v2 = build_release(root, "xr")
    assert (v1.version, v2.version) == (1, 2)
    assert [p["name"] for p in v2.manifest["parts"]] == ["v2"]  # nothing reused across spaces
    assert v2.manifest["actions"]["state_names"][0] == "left.thumb_tip.x"
    assert main(["release", "diff", "xr", "v1", "v2", "--data", str(root)]) == 0
    out = capsys.readouterr().out
    assert "* action space source -> fingertips (frame head, hands both, rotation rot6d, " in out
    assert "horizon 2," in out


def test_state_members_at_once_are_the_bytes_tar_sample_writes():
    from types import SimpleNamespace

    from ego_assets.formats.egosmith_tar import tar_sample
    from ego_assets.releases.webdataset import _state_members

    rng = np.random.default_rng(0)
    keys = [f"demo_ep000007_f{i:06d}" for i in range(5)]
    table = SimpleNamespace(
        state=rng.normal(size=(5, 22)).astype(np.float32),
        action=rng.normal(size=(5, 44)).astype(np.float32),
    )
    table.state[1, :11] = np.nan
    valid = rng.random((5, 3)) > 0.5
    got = _state_members(keys, table, valid)
    for i, key in enumerate(keys):
        want = tar_sample(
            key,
            [
                ("state.npy", npy(table.state[i])),
                ("action.npy", npy(table.action[i])),
                ("valid.npy", npy(valid[i])),
            ],
        )
        assert got[i].tobytes() == want
    mixed = [*keys[:4], "demo_ep000007_f1000000"]  # one key longer: member by member
    assert _state_members(mixed, table, valid)[4].tobytes().startswith(b"demo_ep000007_f1000000")


def npy(array):
    from ego_assets.formats.egosmith_webdataset import npy_bytes

    return npy_bytes(array)


def test_a_derived_version_grows_by_parts_and_rebuilds_byte_for_byte(built_root, tmp_path):
    from ego_assets.releases.build import rebuild_release

    root = tmp_path / "data"
    shutil.copytree(built_root, root)
    _write_spec(root, "grow", EEF.replace("[split]", '[select]\nsource_kinds = ["webxr"]\n[split]'))
    v1 = build_release(root, "grow")
    _write_spec(root, "grow", EEF)
    v2 = build_release(root, "grow")
    assert [p["name"] for p in v2.manifest["parts"]] == ["v1", "v2"]  # v1's part kept
    dataset = v2.path / "lerobot" / "train"
    first = dataset / "data" / "chunk-000" / "file-000.parquet"  # v1's part: linked
    assert first.stat().st_ino == (v1.path / first.relative_to(v2.path)).stat().st_ino
    stats = json.loads((dataset / "meta" / "stats.json").read_text())
    rows = np.concatenate(
        [
            np.array(pq.read_table(p).column("observation.state").to_pylist())
            for p in sorted(dataset.glob("data/*/*.parquet"))
        ]
    )
    np.testing.assert_allclose(stats["observation.state"]["mean"], np.nanmean(rows, 0), rtol=1e-6)
    index = json.loads((v2.path / "webdataset" / "index.json").read_text())
    assert index["actions"]["state_names"] == list(SPACE.state_names())
    assert v2.manifest["actions"]["sources"]["joint_sets"].keys() >= {"webxr25", "arkit27"}
    for result in (v1, v2):
        again = rebuild_release(root, "grow", result.version, tmp_path / f"again-{result.version}")
        assert _tree(again) == _tree(result.path)


def test_a_capture_that_cannot_give_the_space_fails_the_build_naming_it(built_root, tmp_path):
    from ego_assets.releases.derived import ActionsError

    root = tmp_path / "data"
    shutil.copytree(built_root, root)
    header = root / "trajectory" / "rel-xr-b" / "capture.json"
    doc = json.loads(header.read_text())  # no head pose, no posed camera: no head frame
    doc["streams"] = [s for s in doc["streams"] if s["kind"] not in ("pose", "media_frames")]
    doc["media"] = [m for m in doc["media"] if not m.get("frames_stream")]
    header.write_text(json.dumps(doc))
    _write_spec(root, "headless", EEF)  # a new release: the copied root holds `eef` v1
    with pytest.raises(ActionsError) as err:
        build_release(root, "headless")
    message = str(err.value)
    assert message.startswith(f"capture rel-xr-b: {root / 'trajectory' / 'rel-xr-b'}: ")
    assert "actions.frame: no head pose is recorded" in message and "\n" not in message
    assert list((root / "releases" / "headless").iterdir()) == []  # nothing written


def test_runs_of_one_episode_pack_the_bytes_of_the_default_runs(built_root, eef, monkeypatch):
    """The packings derive a run of episodes together (`derive_many`, the merge's read
    chunks): runs of one give the same files, byte for byte."""
    from ego_assets.formats import ceres_merge
    from ego_assets.releases import derived, webdataset
    from ego_assets.releases.build import rebuild_release

    monkeypatch.setattr(derived, "DERIVE_CHUNK", 1)
    monkeypatch.setattr(webdataset, "DERIVE_CHUNK", 1)
    monkeypatch.setattr(ceres_merge, "CHUNK_SHARDS", 1)
    spent = derived.derivation_cpu_s()
    again = rebuild_release(built_root, "eef", eef.version, built_root.parent / "eef-runs-of-one")
    assert derived.derivation_cpu_s() > spent  # counted in runs of one too
    assert _tree(again) == _tree(eef.path)
