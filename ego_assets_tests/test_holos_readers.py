"""Holos HDF5 files read by the ecosystem's own tools, for every source kind.

* robomimic 0.3.0 (PyPI) runs the format's robomimic recipe in its own virtualenv
  (``.venv-robomimic``, made by ``make robomimic-venv``: CPU torch, robomimic without
  its training stack), as a subprocess: `ROBOMIMIC_SCRIPT`.
* the IOOS compliance-checker at ``cf:1.11`` checks a flat netCDF copy of each CF group
  (the checker reads root-group variables only); CF forbids string-valued coordinate
  variables, which the format's label scales are, so those are left out of the copy.
* Debian's ``h5dump -A`` shows the Image spec and dimension-scale attributes.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

from ego_assets_tests.holos_files import KINDS
from ego_assets_tests.other_venvs import ROBOMIMIC_PYTHON, run_recipe, venv_env
from ego_assets_tests.waiting import CEILING_S

# The format's robomimic recipe; prints what it returned as JSON on the last line.
RECIPE = r"""
import ast, json, os, sys
from pathlib import Path

import h5py
import numpy as np
import robomimic
from robomimic.utils.dataset import SequenceDataset

path, obs_key = sys.argv[1], sys.argv[2]

# robomimic.utils.file_utils.get_env_metadata_from_dataset, from robomimic's source: the
# module imports robomimic's networks (torchvision), absent beside the CPU torch build.
source = Path(robomimic.__file__).parent / "utils" / "file_utils.py"
tree = ast.parse(source.read_text())
func = next(n for n in tree.body if getattr(n, "name", "") == "get_env_metadata_from_dataset")
scope = {"h5py": h5py, "json": json, "os": os}
exec(compile(ast.Module([func], []), str(source), "exec"), scope)
meta = scope["get_env_metadata_from_dataset"](path)

ds = SequenceDataset(
    hdf5_path=path,
    obs_keys=[obs_key],
    dataset_keys=["actions"],
    seq_length=10,
    filter_by_attribute="all",
)
sample = ds[0]
print(json.dumps({
    "env_name": meta["env_name"],
    "type": meta["type"],
    "len": len(ds),
    "obs_shape": list(sample["obs"][obs_key].shape),
    "obs": np.nan_to_num(np.asarray(sample["obs"][obs_key], dtype=float), nan=1e300).tolist(),
    "actions": np.asarray(sample["actions"], dtype=float).tolist(),
}))
"""


def _main_obs_key(path: Path) -> str:
    with h5py.File(path) as f:
        obs = f["data/demo_0/obs"]
        for key in ("hand_right_joints_world", "hand_right_landmarks_3d", "device_pose"):
            if key in obs:
                return key
    raise AssertionError(f"{path}: no hand or device obs")


@pytest.mark.skipif(
    not ROBOMIMIC_PYTHON.exists(), reason="no robomimic virtualenv (make robomimic-venv)"
)
@pytest.mark.parametrize("kind", KINDS)
def test_robomimic_sequence_dataset_reads_every_source_kind(holos_exports, kind, tmp_path):
    path, _ = holos_exports[kind]
    key = _main_obs_key(path)
    args = ["-c", RECIPE, str(path), key]
    line = run_recipe(ROBOMIMIC_PYTHON, args, cwd=tmp_path, env=venv_env(), timeout_s=600)
    got = json.loads(line)
    with h5py.File(path) as f:
        demo = f["data/demo_0"]
        obs = demo[f"obs/{key}"][:10]
        actions = demo["actions"][:10]
        total = int(f["data"].attrs["total"])
    assert got["env_name"] == "holos_capture" and got["type"] == 99
    assert got["len"] == total  # one sequence per sample (padded at the end)
    assert got["obs_shape"] == [10, *obs.shape[1:]]
    np.testing.assert_array_equal(np.asarray(got["obs"]), np.nan_to_num(obs, nan=1e300))
    np.testing.assert_allclose(np.asarray(got["actions"]), actions, rtol=1e-6, atol=1e-7)


def _flat_group_copies(path: Path, out: Path) -> list[Path]:
    """One netCDF file per CF-bearing group, root attributes included, labels left out."""
    xr = pytest.importorskip("xarray")
    tree = xr.open_datatree(path, engine="h5netcdf", phony_dims="sort")
    groups = ["data/demo_0", "data/demo_0/obs"]
    groups += [n.path.lstrip("/") for n in tree["holos/raw"].subtree if "time" in n.dims]
    files = []
    for group in groups:
        ds = tree[group].to_dataset()
        ds = ds.drop_vars([n for n, v in ds.variables.items() if v.dtype.kind in "OUS"])
        ds.attrs = {**tree.attrs, **ds.attrs}
        target = out / f"{group.replace('/', '__')}.nc"
        ds.to_netcdf(
            target, engine="h5netcdf", encoding={n: {"_FillValue": None} for n in ds.coords}
        )
        files.append(target)
    return files


@pytest.mark.parametrize("kind", KINDS)
def test_compliance_checker_cf_1_11_finds_no_errors(holos_exports, kind, tmp_path):
    runner = pytest.importorskip("compliance_checker.runner")
    path, _ = holos_exports[kind]
    runner.CheckSuite.load_all_available_checkers()
    for flat in _flat_group_copies(path, tmp_path):
        report = tmp_path / f"{flat.stem}.json"
        runner.ComplianceChecker.run_checker(
            str(flat), ["cf:1.11"], 1, "normal", output_filename=str(report), output_format="json"
        )
        result = json.loads(report.read_text())["cf:1.11"]
        errors = [m for item in result["high_priorities"] for m in item["msgs"]]
        assert errors == [], (flat.name, errors)
        warnings = [m for item in result["medium_priorities"] for m in item["msgs"]]
        # the only recommendation left: [T, joint, component] axes, as the format lays them out
        assert all("recommended order T, Z, Y, X" in m for m in warnings), (flat.name, warnings)
        assert result["scored_points"] > 0


@pytest.mark.skipif(shutil.which("h5dump") is None, reason="h5dump (Debian hdf5-tools) missing")
def test_h5dump_shows_image_and_dimension_scale_attributes(holos_exports):
    path, _ = holos_exports["holos-visionpro"]
    run = subprocess.run(
        ["h5dump", "-A", str(path)], capture_output=True, text=True, timeout=CEILING_S
    )
    assert run.returncode == 0, run.stderr
    text = run.stdout
    thumb = text[text.index('DATASET "thumbnail"') :]
    thumb = thumb[: thumb.index('DATASET "', 10)] if 'DATASET "' in thumb[10:] else thumb
    for attr, value in (
        ("CLASS", "IMAGE"),
        ("IMAGE_VERSION", "1.2"),
        ("IMAGE_SUBCLASS", "IMAGE_TRUECOLOR"),
        ("INTERLACE_MODE", "INTERLACE_PIXEL"),
    ):
        block = thumb[thumb.index(f'ATTRIBUTE "{attr}"') :]
        assert f'"{value}"' in block[: block.index("}") + 200], attr
    assert 'ATTRIBUTE "DIMENSION_LIST"' in thumb
    time = text[text.index('DATASET "time"') :]
    assert '"DIMENSION_SCALE"' in time[:600] and 'ATTRIBUTE "REFERENCE_LIST"' in time
    assert 'OPAQUE_TAG "video/quicktime";' in text
    assert text.count('"DIMENSION_SCALE"') >= 10


def test_media_recipe_runs_in_a_fresh_interpreter(holos_exports, holos_captures, tmp_path):
    """The format's media recipe verbatim, outside this test process."""
    path, _ = holos_exports["holos-iphone"]
    recipe = (
        "import h5py, numpy as np\n"
        f"with h5py.File({str(path)!r}) as f:\n"
        "    ds = f['media/camera_back']\n"
        "    print(ds.id.get_type().get_tag())\n"
        "    raw = np.empty(ds.shape, dtype='V1')\n"
        "    ds.id.read(h5py.h5s.ALL, h5py.h5s.ALL, raw, mtype=ds.id.get_type())\n"
        "    open('camera_back.mov', 'wb').write(raw.tobytes())\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", recipe],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=CEILING_S,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "b'video/quicktime'"
    folder, _ = holos_captures["holos-iphone"]
    written = (tmp_path / "camera_back.mov").read_bytes()
    assert written == (folder / "media/camera_back.mov").read_bytes()
