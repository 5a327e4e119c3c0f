import hashlib
import json
import os
import time

import pytest

from ego_assets.capture.files import MARKER_FILE, CaptureFiles
from ego_assets.capture.manifest import RawManifest, copy_capture, read_manifest, write_marker
from ego_assets.errors import CaptureFormatError
from ego_assets.landing import scan_landing
from ego_assets.storage import Storage


def _capture(folder, files=None, kind="holos"):
    folder.mkdir(parents=True)
    for rel, text in (files or {"metadata.json": "{}", "data/a.csv": "x\n1\n"}).items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(text)
    write_marker(folder, kind)
    return folder


def test_copy_records_size_and_sha256_of_every_file(tmp_path):
    src = _capture(tmp_path / "cap", {"metadata.json": "{}", "data/a.csv": "x\n1\n"})
    dest = tmp_path / "raw"
    dest.mkdir()
    manifest = copy_capture(CaptureFiles("cap", src), dest)
    by_path = {f.path: f for f in manifest.files}
    assert set(by_path) == {"metadata.json", "data/a.csv", MARKER_FILE}
    assert by_path["data/a.csv"].bytes == 4
    assert by_path["data/a.csv"].sha256 == hashlib.sha256(b"x\n1\n").hexdigest()
    assert (dest / "capture" / "data/a.csv").read_text() == "x\n1\n"
    assert sorted(p.name for p in dest.iterdir()) == ["capture", "manifest.json"]
    assert read_manifest(dest) == manifest
    assert manifest.kind == "holos" and manifest.capture == "cap"
    assert RawManifest.from_json(manifest.to_json()).content_sha256 == manifest.content_sha256


def test_missing_marker_is_an_error_naming_the_marker(tmp_path):
    (tmp_path / "cap").mkdir()
    (tmp_path / "cap" / "a.csv").write_text("x\n")
    with pytest.raises(CaptureFormatError, match=f"capture 'cap', file '{MARKER_FILE}'"):
        copy_capture(CaptureFiles("cap", tmp_path / "cap"), tmp_path)


def test_file_changed_after_marker_is_reported_with_its_path(tmp_path):
    src = _capture(tmp_path / "cap")
    (src / "data/a.csv").write_text("x\n2\n")
    dest = tmp_path / "raw"
    dest.mkdir()
    with pytest.raises(CaptureFormatError, match=r"file 'data/a\.csv'.*SHA-256"):
        copy_capture(CaptureFiles("cap", src), dest)


def test_undeclared_file_is_reported(tmp_path):
    src = _capture(tmp_path / "cap")
    (src / "late.txt").write_text("late")
    dest = tmp_path / "raw"
    dest.mkdir()
    with pytest.raises(CaptureFormatError, match=r"file 'late\.txt'.*not declared"):
        copy_capture(CaptureFiles("cap", src), dest)


def test_symlink_pointing_outside_the_capture_is_refused(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("do not copy")
    src = tmp_path / "cap"
    src.mkdir()
    os.symlink(secret, src / "link.txt")
    (src / MARKER_FILE).write_text(
        json.dumps({"format": "ego-capture-marker", "version": 1, "kind": "holos"})
    )
    dest = tmp_path / "raw"
    dest.mkdir()
    with pytest.raises(CaptureFormatError, match=r"file 'link\.txt': symlink points outside"):
        copy_capture(CaptureFiles("cap", src), dest)
    assert not (dest / "capture" / "link.txt").exists()


@pytest.mark.parametrize("name", ["../outside.csv", "/etc/passwd", "a/../../b.csv"])
def test_file_names_escaping_the_capture_are_refused(tmp_path, name):
    files = CaptureFiles("cap", tmp_path)
    with pytest.raises(CaptureFormatError, match="escapes the capture folder"):
        files.path(name)


def test_marker_declaring_an_escaping_path_is_refused(tmp_path):
    src = _capture(tmp_path / "cap")
    marker = json.loads((src / MARKER_FILE).read_text())
    marker["files"].append({"path": "../x", "bytes": 1, "sha256": "0" * 64})
    (src / MARKER_FILE).write_text(json.dumps(marker))
    dest = tmp_path / "raw"
    dest.mkdir()
    with pytest.raises(CaptureFormatError, match=r"file '\.\./x': file name escapes"):
        copy_capture(CaptureFiles("cap", src), dest)


@pytest.mark.parametrize(
    ("marker", "field"),
    [
        ({"format": "other", "version": 1, "kind": "holos"}, "format"),
        ({"format": "ego-capture-marker", "version": 9, "kind": "holos"}, "version"),
        ({"format": "ego-capture-marker", "version": 1, "kind": "kinect"}, "kind"),
    ],
)
def test_bad_marker_fields_are_named(tmp_path, marker, field):
    (tmp_path / MARKER_FILE).write_text(json.dumps(marker))
    with pytest.raises(CaptureFormatError, match=f"field '{field}'"):
        copy_capture(CaptureFiles("cap", tmp_path), tmp_path / "raw")


def _land(landing, key, mtime):
    folder = _capture(landing / key)
    os.utime(folder / MARKER_FILE, (mtime, mtime))


def test_landing_scan_orders_by_completion_bounds_per_tick_and_resumes(tmp_path):
    storage = Storage(tmp_path)
    landing = tmp_path / "landing"
    base = time.time() - 100
    for i, key in enumerate(["c-3", "c-1", "c-2", "c-4"]):
        _land(landing, key, base + i)
    (landing / "incomplete").mkdir()
    (landing / "incomplete" / "a.csv").write_text("x")
    first = scan_landing(storage, None, limit=3)
    assert first.keys == ("c-3", "c-1", "c-2") and first.pending == 1
    second = scan_landing(storage, first.cursor, limit=3)
    assert second.keys == ("c-4",) and second.pending == 0
    third = scan_landing(storage, second.cursor, limit=3)
    assert third.keys == () and third.cursor == second.cursor
    _land(landing, "c-5", base + 50)
    assert scan_landing(storage, second.cursor, limit=3).keys == ("c-5",)


def test_landing_scan_rejects_invalid_keys_and_moves_past_them(tmp_path):
    storage = Storage(tmp_path)
    _land(tmp_path / "landing", "bad key", time.time() - 10)
    _land(tmp_path / "landing", "good", time.time() - 5)
    scan = scan_landing(storage, None, limit=10)
    assert scan.keys == ("good",) and scan.rejected == ("bad key",)
    assert scan_landing(storage, scan.cursor, limit=10).rejected == ()
