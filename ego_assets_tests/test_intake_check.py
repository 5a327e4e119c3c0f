"""Both intake paths (`ego-assets convert` and the raw copy) run the one marker check."""

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest

from ego_assets.capture import read_checked_capture
from ego_assets.capture.files import MARKER_FILE, CaptureFiles
from ego_assets.capture.manifest import (
    MANIFEST_FILE,
    check_capture,
    raw_capture_dir,
    read_manifest,
    write_marker,
)
from ego_assets.cli import main
from ego_assets.errors import CaptureFormatError
from ego_assets.pipeline import ingest_raw, normalize
from ego_assets.storage import Storage
from ego_assets.synth import synthesize
from ego_assets.trajectory.store import read_trajectory


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("synth") / "xr"
    return synthesize("webxr", out, seconds=1.0, seed=5, capture_id="xr")


def _marker(folder: Path) -> dict:
    return json.loads((folder / MARKER_FILE).read_text())


def _edit_marker(folder: Path, edit) -> None:
    marker = _marker(folder)
    edit(marker["files"])
    (folder / MARKER_FILE).write_text(json.dumps(marker))


def _changed_same_size(folder: Path) -> None:
    path = folder / "session.json"
    data = bytearray(path.read_bytes())
    data[-2] = ord(" ") if data[-2] != ord(" ") else ord("\t")
    path.write_bytes(bytes(data))


# (case, how to break the capture, expected message fragment)
CASES = [
    ("changed after marker", _changed_same_size, "file 'session.json', field 'files', row "),
    (
        "grown after marker",
        lambda f: (f / "session.json").write_bytes((f / "session.json").read_bytes() + b" "),
        ": size differs from the marker",
    ),
    (
        "traversal in marker",
        lambda f: _edit_marker(
            f,
            lambda files: files.append(
                {"path": "../../etc/passwd", "bytes": 1, "sha256": "0" * 64}
            ),
        ),
        "file '../../etc/passwd': file name escapes the capture folder",
    ),
    (
        "absolute name in marker",
        lambda f: _edit_marker(
            f, lambda files: files.append({"path": "/etc/passwd", "bytes": 1, "sha256": "0" * 64})
        ),
        "file '/etc/passwd': file name escapes the capture folder",
    ),
    (
        "declared but missing",
        lambda f: (f / "session.json").unlink(),
        "file 'session.json', field 'files', row ",
    ),
    (
        "not declared",
        lambda f: (f / "late.txt").write_text("late"),
        "file 'late.txt', field 'files': file is not declared in the marker",
    ),
    (
        "entry of the wrong types",
        lambda f: _edit_marker(f, lambda files: files.insert(0, {"path": 7, "bytes": "x"})),
        f"file '{MARKER_FILE}', field 'files', row 1: entry needs path (text)",
    ),
    (
        "declared twice",
        lambda f: _edit_marker(f, lambda files: files.append(dict(files[0]))),
        "declared twice in the marker",
    ),
]


@pytest.mark.parametrize(("case", "breakage", "expected"), CASES, ids=[c[0] for c in CASES])
def test_convert_and_raw_copy_refuse_the_same_marker_mismatch(
    synthetic, tmp_path, capsys, case, breakage, expected
):
    storage = Storage(tmp_path / "data")
    capture = tmp_path / "data" / "landing" / "xr"
    shutil.copytree(synthetic, capture)
    breakage(capture)

    with pytest.raises(CaptureFormatError) as raised:
        ingest_raw(storage, "xr")
    message = str(raised.value)
    assert message.startswith("capture 'xr', ") and expected in message
    if case == "changed after marker":
        assert "SHA-256 differs from the marker" in message
    if case == "declared but missing":
        assert "declared in the marker but missing" in message
    assert not (tmp_path / "data" / "raw").exists() or not any(
        (tmp_path / "data" / "raw").iterdir()
    )

    out = tmp_path / "trajectory"
    assert main(["convert", str(capture), str(out)]) == 2
    err = capsys.readouterr().err
    assert err == f"error: {message}\n"
    assert not out.exists()


def test_convert_and_raw_copy_agree_on_a_good_capture(synthetic, tmp_path):
    storage = Storage(tmp_path / "data")
    shutil.copytree(synthetic, tmp_path / "data" / "landing" / "xr")
    raw = ingest_raw(storage, "xr")
    trajectory, manifest = read_checked_capture("xr", synthetic)
    assert manifest.content_sha256 == raw.data_version
    assert manifest == read_manifest(tmp_path / "data" / "raw" / "xr")
    normalize(storage, "xr")
    stored = read_trajectory(tmp_path / "data" / "trajectory" / "xr")
    assert stored.extra_files == trajectory.extra_files == ()
    assert [s.name for s in stored.streams] == sorted(s.name for s in trajectory.streams)


def test_raw_copy_of_the_old_layout_is_made_again(synthetic, tmp_path):
    """A version-1 raw copy (files beside manifest.json) is replaced by the new layout."""
    storage = Storage(tmp_path / "data")
    shutil.copytree(synthetic, tmp_path / "data" / "landing" / "xr")
    old = tmp_path / "data" / "raw" / "xr"
    shutil.copytree(synthetic, old)
    manifest = check_capture(CaptureFiles("xr", synthetic))
    body = json.loads(manifest.to_json())
    body["version"] = 1
    (old / MANIFEST_FILE).write_text(json.dumps(body))
    result = ingest_raw(storage, "xr")
    assert not result.reused and result.data_version == manifest.content_sha256
    assert sorted(p.name for p in old.iterdir()) == ["capture", MANIFEST_FILE]
    assert read_manifest(old).version == 2
    assert (raw_capture_dir(old) / "session.json").read_bytes() == (
        synthetic / "session.json"
    ).read_bytes()


def test_write_marker_refuses_a_symlink_and_never_reads_its_target(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("root:x:0:0")
    capture = tmp_path / "cap"
    capture.mkdir()
    (capture / "a.txt").write_text("a")
    os.symlink(secret, capture / "passwd")
    with pytest.raises(CaptureFormatError, match=r"capture 'cap', file 'passwd': is a symlink"):
        write_marker(capture, "holos")
    assert not (capture / MARKER_FILE).exists()
    (capture / "passwd").unlink()
    os.symlink(tmp_path, capture / "up")  # a linked folder is refused too, not walked
    with pytest.raises(CaptureFormatError, match=r"file 'up': is a symlink"):
        write_marker(capture, "holos")
    (capture / "up").unlink()
    write_marker(capture, "holos")
    (entry,) = _marker(capture)["files"]
    assert entry == {"path": "a.txt", "bytes": 1, "sha256": hashlib.sha256(b"a").hexdigest()}
