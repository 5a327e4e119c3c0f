"""docs/releases.md's "Train on a release" blocks, run as written against a small release.

Each fenced block after a ``<!-- docs-test: NAME -->`` line is run from the data root of
a release ``xr`` (two WebXR episodes, both in ``train``) by the Python of its loader: the
platform's for WebDataset, robomimic's and lerobot's own virtualenvs for theirs. What
each prints is checked against the manifest and the packed files.
"""

import json
import re
import sys
from pathlib import Path

import h5py
import pytest

from ego_assets.releases.build import build_release
from ego_assets_tests.other_venvs import (
    REPO,
    ROBOMIMIC_PYTHON,
    lerobot_python,
    run_recipe,
    venv_env,
)
from ego_assets_tests.test_releases import WEBXR_ONLY, _write_spec, make_release_root

DOC = REPO / "docs" / "releases.md"
BLOCK = re.compile(r"<!-- docs-test: (\w+) -->\n```python\n(.*?)\n```", re.S)


def doc_blocks() -> dict[str, str]:
    """NAME -> code of every block marked for testing in docs/releases.md."""
    return dict(BLOCK.findall(DOC.read_text()))


def test_the_page_marks_one_block_per_loader():
    assert sorted(doc_blocks()) == ["lerobot", "robomimic", "webdataset"]


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    """The data root with release ``xr`` v1 built (read only by the blocks)."""
    data = make_release_root(tmp_path_factory.mktemp("docs-root"))
    _write_spec(data, "xr", WEBXR_ONLY.replace("train = 0.5, valid = 0.5", "train = 1.0"))
    return data


@pytest.fixture(scope="module")
def release(root):
    result = build_release(root, "xr")
    assert result.version == 1 and len(result.manifest["episodes"]) == 2
    return result


def _run(python: Path, code: str, cwd: Path, tmp_path: Path) -> str:
    return run_recipe(python, ["-c", code], cwd=cwd, env=venv_env(hf_home=tmp_path), timeout_s=900)


def test_webdataset_block(release, root, tmp_path):
    index = json.loads((release.path / "webdataset" / "index.json").read_text())
    line = _run(Path(sys.executable), doc_blocks()["webdataset"], root, tmp_path)
    assert line.startswith(f"train samples: {index['splits']['train']['samples']} image: (")
    assert index["splits"]["train"]["samples"] > 0


@pytest.mark.skipif(not ROBOMIMIC_PYTHON.exists(), reason="no robomimic virtualenv")
def test_robomimic_block(release, root, tmp_path):
    with h5py.File(release.path / "robomimic" / "release.hdf5") as f:
        demos = [n.decode() for n in f["mask/train"][:]]
        # seq_length 10 with robomimic's default padding: one sequence per sample
        samples = sum(int(f[f"data/{d}"].attrs["num_samples"]) for d in demos)
    line = _run(ROBOMIMIC_PYTHON, doc_blocks()["robomimic"], root, tmp_path)
    assert line == f"train sequences: {samples} demos: {len(demos)}"


def test_lerobot_block(release, root, tmp_path):
    python = lerobot_python()
    if python is None:
        pytest.skip("no lerobot environment (make lerobot-env)")
    info = json.loads((release.path / "lerobot/train/meta/info.json").read_text())
    action = info["features"]["action"]["shape"]
    line = _run(python, doc_blocks()["lerobot"], root, tmp_path)
    shape = ", ".join(map(str, [3, *action]))
    assert line == f"train frames: {info['total_frames']} episodes: 2 action: ({shape})"
