"""docs/releases.md's "Train on a release" blocks, run as written against small releases.

Each fenced block after a ``<!-- docs-test: NAME -->`` line is run from a data root by the
Python (or, for a ``bash`` block, the shell with the ``bin/`` folder first on ``PATH``) of
its loader's environment: the platform's for WebDataset, robomimic's and lerobot's own
virtualenvs for theirs. The loader blocks read release ``xr`` (two WebXR episodes, both in
``train``); the trainer blocks read ``hands``, built from the page's own
``<!-- docs-spec: hands -->`` spec (two fully tracked Vision Pro episodes). What each
prints is checked against the manifest and the packed files.
"""

import io
import json
import math
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import h5py
import numpy as np
import pytest

from ego_assets.releases.build import build_release
from ego_assets_tests.other_venvs import (
    REPO,
    ROBOMIMIC_PYTHON,
    lerobot_python,
    run_recipe,
    venv_env,
)
from ego_assets_tests.test_releases import CAPTURES, WEBXR_ONLY, _write_spec, make_release_root

DOC = REPO / "docs" / "releases.md"
BLOCK = re.compile(r"<!-- docs-test: (\w+) -->\n```(python|bash)\n(.*?)\n```", re.S)
SPEC = re.compile(r"<!-- docs-spec: (\w+) -->\n```toml\n(.*?)\n```", re.S)
# a second fully tracked Vision Pro capture, so the trainers see two episodes
DOCS_CAPTURES = {**CAPTURES, "rel-vp-2": ("holos-visionpro", ())}
TRAIN_TIMEOUT_S = 1800  # a ceiling for a very busy machine, not a deadline
LOSS = re.compile(r"step:(\d+) .*?\bloss:(\S+)")


def doc_blocks() -> dict[str, tuple[str, str]]:
    """NAME -> (language, code) of every block marked for testing in docs/releases.md."""
    return {name: (lang, code) for name, lang, code in BLOCK.findall(DOC.read_text())}


def test_the_page_marks_one_block_per_loader_and_trainer():
    assert sorted(doc_blocks()) == [
        "lerobot",
        "lerobot_train",
        "robomimic",
        "robomimic_train",
        "webdataset",
        "webdataset_windows",
    ]
    assert sorted(dict(SPEC.findall(DOC.read_text()))) == ["hands"]


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    """The data root with releases ``xr`` and ``hands`` v1 built (read only by the blocks,
    which write below ``outputs/`` and their own config files)."""
    data = make_release_root(tmp_path_factory.mktemp("docs-root"), DOCS_CAPTURES)
    _write_spec(data, "xr", WEBXR_ONLY.replace("train = 0.5, valid = 0.5", "train = 1.0"))
    _write_spec(data, "hands", dict(SPEC.findall(DOC.read_text()))["hands"])
    return data


@pytest.fixture(scope="module")
def release(root):
    result = build_release(root, "xr")
    assert result.version == 1 and len(result.manifest["episodes"]) == 2
    return result


@pytest.fixture(scope="module")
def hands(root):
    result = build_release(root, "hands")
    keys = [e["capture_key"] for e in result.manifest["episodes"]]
    assert keys == ["rel-vp", "rel-vp-2"]  # only the fully tracked ones
    return result


def _run(python: Path, name: str, cwd: Path, tmp_path: Path) -> str:
    """Run block ``name`` with ``python``'s environment; its whole stdout."""
    lang, code = doc_blocks()[name]
    env = venv_env(hf_home=tmp_path)
    env["PATH"] = f"{python.parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONUNBUFFERED"] = "1"  # robomimic's tee to its log file never flushes stdout
    command = [str(python), "-c", code] if lang == "python" else ["bash", "-euo", "pipefail"]
    run = subprocess.run(
        command,
        input=None if lang == "python" else code,
        capture_output=True,
        text=True,
        timeout=TRAIN_TIMEOUT_S,
        cwd=cwd,
        env=env,
    )
    assert run.returncode == 0, (run.stdout[-2000:], run.stderr[-3000:])
    return run.stdout + run.stderr


def _last_line(python: Path, name: str, cwd: Path, tmp_path: Path) -> str:
    lang, code = doc_blocks()[name]
    assert lang == "python"
    return run_recipe(python, ["-c", code], cwd=cwd, env=venv_env(hf_home=tmp_path), timeout_s=900)


def _train_demos(version: Path) -> tuple[list[str], int]:
    """The robomimic packing's train-mask demos of a release version, and their samples."""
    with h5py.File(version / "robomimic" / "release.hdf5") as f:
        demos = [n.decode() for n in f["mask/train"][:]]
        return demos, sum(int(f[f"data/{d}"].attrs["num_samples"]) for d in demos)


def test_webdataset_block(release, root, tmp_path):
    index = json.loads((release.path / "webdataset" / "index.json").read_text())
    line = _last_line(Path(sys.executable), "webdataset", root, tmp_path)
    assert line.startswith(f"train samples: {index['splits']['train']['samples']} image: (")
    assert index["splits"]["train"]["samples"] > 0


@pytest.mark.skipif(not ROBOMIMIC_PYTHON.exists(), reason="no robomimic virtualenv")
def test_robomimic_block(release, root, tmp_path):
    # seq_length 10 with robomimic's default padding: one sequence per sample
    demos, samples = _train_demos(release.path)
    line = _last_line(ROBOMIMIC_PYTHON, "robomimic", root, tmp_path)
    assert line == f"train sequences: {samples} demos: {len(demos)}"


def test_lerobot_block(release, root, tmp_path):
    python = lerobot_python()
    if python is None:
        pytest.skip("no lerobot environment (make lerobot-env)")
    info = json.loads((release.path / "lerobot/train/meta/info.json").read_text())
    action = info["features"]["action"]["shape"]
    line = _last_line(python, "lerobot", root, tmp_path)
    shape = ", ".join(map(str, [3, *action]))
    assert line == f"train frames: {info['total_frames']} episodes: 2 action: ({shape})"


# -- the trainers -----------------------------------------------------------------------


def test_lerobot_train_block_loss_goes_down(hands, root, tmp_path):
    python = lerobot_python()
    if python is None:
        pytest.skip("no lerobot environment (make lerobot-env)")
    info = json.loads((hands.path / "lerobot/train/meta/info.json").read_text())
    log = _run(python, "lerobot_train", root, tmp_path)
    # lerobot-train read the whole split: its frames and episodes
    assert f"dataset.num_frames={info['total_frames']} " in log
    assert "dataset.num_episodes=2" in log
    curve = [(int(step), float(loss)) for step, loss in LOSS.findall(log)]
    assert [step for step, _ in curve] == [2, 4, 6, 8, 10, 12]
    losses = [loss for _, loss in curve]
    assert all(math.isfinite(v) for v in losses), curve
    # seeded; the first mean is several times the last on this data (ACT's KL term falls
    # fastest): a fall by half is far from noise
    assert losses[-1] < 0.5 * losses[0], curve
    assert "End of training" in log


@pytest.mark.skipif(not ROBOMIMIC_PYTHON.exists(), reason="no robomimic virtualenv")
def test_robomimic_train_block_runs_an_epoch(hands, root, tmp_path):
    demos, samples = _train_demos(hands.path)
    log = _run(ROBOMIMIC_PYTHON, "robomimic_train", root, tmp_path)
    assert log.rstrip().endswith("finished run successfully!"), log[-3000:]
    # the dataset robomimic built: every sample of the train mask's demos, one sequence each
    assert f"num_demos={len(demos)}" in log and f"num_sequences={samples}" in log
    # one pass: every full batch of 16 (train.py drops the last partial one)
    assert f"| {samples // 16}/{samples // 16} [" in log
    epoch = json.loads(log.split("Train Epoch 1\n", 1)[1].split("\n}\n", 1)[0] + "\n}")
    assert math.isfinite(epoch["Loss"]) and epoch["Loss"] > 0, epoch
    assert math.isfinite(epoch["L2_Loss"]) and math.isfinite(epoch["Policy_Grad_Norms"])
    # train.py's own log file for the run holds the same epoch
    logs = list((root / "outputs" / "robomimic" / "bc-hands").glob("*/logs/log.txt"))
    assert len(logs) == 1 and "Train Epoch 1" in logs[0].read_text()


def _packed_samples(release_path: Path) -> dict[tuple[str, int], dict[str, np.ndarray]]:
    """(capture id, sample index) -> ``state``, ``action`` of every train sample, read
    with tarfile."""
    index = json.loads((release_path / "webdataset" / "index.json").read_text())
    members: dict[str, dict[str, bytes]] = {}
    for shard in index["splits"]["train"]["shards"]:
        with tarfile.open(release_path / "webdataset" / shard) as tar:
            for member in tar.getmembers():
                key, ext = member.name.split(".", 1)
                data = tar.extractfile(member)
                assert data is not None
                members.setdefault(key, {})[ext] = data.read()
    out = {}
    for parts in members.values():
        meta = json.loads(parts["meta.json"])
        out[(meta["capture_id"], int(meta["sample_index"]))] = {
            name: np.load(io.BytesIO(parts[f"{name}.npy"])) for name in ("state", "action")
        }
    return out


def test_webdataset_windows_block_batches_windows(hands, root, tmp_path):
    python = lerobot_python()  # WebLoader is torch's DataLoader: an environment with torch
    if python is None:
        pytest.skip("no lerobot environment (make lerobot-env)")
    packed = _packed_samples(hands.path)
    printed = json.loads(_last_line(python, "webdataset_windows", root, tmp_path))
    per_episode: dict[str, int] = {}
    for capture, _ in packed:
        per_episode[capture] = per_episode.get(capture, 0) + 1
    # windows of 8 consecutive samples within an episode, 4 a batch, the last partial dropped
    windows = sum(n - 8 + 1 for n in per_episode.values())
    assert printed["batches"] == windows // 4
    assert printed["state"] == [4, 8, 22] and printed["action"] == [4, 8, 22]
    assert printed["names"] == ["left.eef.x", "left.eef.y", "left.eef.z"]
    first = printed["first"]
    assert first == {"capture_id": "rel-vp", "sample_index": 0}
    for name in ("state", "action"):
        want = np.stack([packed[("rel-vp", i)][name] for i in range(8)])
        got = np.asarray(printed[f"{name}_rows"], dtype=want.dtype)
        np.testing.assert_array_equal(got, want)
    # the next sample's state is this one's action (absolute, horizon 1)
    np.testing.assert_array_equal(printed["action_rows"][0], printed["state_rows"][1])
