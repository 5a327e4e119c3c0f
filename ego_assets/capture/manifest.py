"""The immutable raw copy of a capture and its manifest (SHA-256 of every file).

`copy_capture` checks the completion marker and every file name (nothing may escape
the capture folder), verifies the marker's declared file list when it has one, and
copies the files into a staging folder while hashing them. ``manifest.json`` records
what was copied; its own digest (`RawManifest.content_sha256`) identifies the capture's
content and is the data version of everything derived from it.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ego_assets.capture.files import (
    CAPTURE_KINDS,
    MARKER_FILE,
    MARKER_FORMAT,
    MARKER_VERSION,
    CaptureFiles,
    read_marker,
)
from ego_assets.trajectory.records import from_jsonable, to_jsonable
from ego_assets.trajectory.store import write_file_atomic

MANIFEST_FILE = "manifest.json"
MANIFEST_VERSION = 1
_CHUNK = 1 << 20


@dataclass(frozen=True, slots=True)
class FileEntry:
    """One raw file: relative POSIX path, size in bytes, SHA-256 hex digest."""

    path: str
    bytes: int
    sha256: str


@dataclass(frozen=True, slots=True)
class RawManifest:
    """What the raw copy of a capture holds."""

    capture: str
    kind: str
    files: tuple[FileEntry, ...]
    version: int = MANIFEST_VERSION

    @property
    def content_sha256(self) -> str:
        """Digest of the sorted (path, size, sha256) list: the capture's content id."""
        text = json.dumps([to_jsonable(f) for f in self.files], sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()

    @property
    def total_bytes(self) -> int:
        return sum(f.bytes for f in self.files)

    def to_json(self) -> str:
        body: dict[str, Any] = to_jsonable(self)
        body["content_sha256"] = self.content_sha256
        return json.dumps(body, indent=1, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str) -> RawManifest:
        body = json.loads(text)
        body.pop("content_sha256", None)
        return from_jsonable(cls, body)


def file_sha256(path: Path) -> str:
    """SHA-256 hex digest of a file, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with Path(path).open("rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def write_marker(folder: Path, kind: str) -> Path:
    """Write the completion marker of a capture folder, declaring every file in it.

    Call it last, after every other file is in place (what an uploader does).
    """
    if kind not in CAPTURE_KINDS:
        raise ValueError(f"kind must be one of {CAPTURE_KINDS}, got {kind!r}")
    folder = Path(folder)
    entries = [
        {
            "path": p.relative_to(folder).as_posix(),
            "bytes": p.stat().st_size,
            "sha256": file_sha256(p),
        }
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != MARKER_FILE
    ]
    marker = {"format": MARKER_FORMAT, "version": MARKER_VERSION, "kind": kind, "files": entries}
    text = json.dumps(marker, indent=1, sort_keys=True) + "\n"
    return write_file_atomic(folder / MARKER_FILE, text.encode("utf-8"))


def _copy_hashing(src: Path, dest: Path) -> tuple[int, str]:
    digest = hashlib.sha256()
    size = 0
    dest.parent.mkdir(parents=True, exist_ok=True)
    with src.open("rb") as fin, dest.open("wb") as fout:
        while chunk := fin.read(_CHUNK):
            digest.update(chunk)
            fout.write(chunk)
            size += len(chunk)
    return size, digest.hexdigest()


def copy_capture(files: CaptureFiles, dest: Path) -> RawManifest:
    """Copy the capture into ``dest`` (a fresh staging folder) and write its manifest.

    Raises:
        CaptureFormatError: missing or bad marker, unsafe file names, or files that do
            not match the marker's declared list (named with their path).
    """
    marker = read_marker(files)
    names = files.list_files()
    entries = []
    for rel in names:
        path = files.path(rel, must_exist=False)
        size, sha = _copy_hashing(path, dest / rel)
        entries.append(FileEntry(rel, size, sha))
    declared = marker.get("files")
    if declared is not None:
        _check_declared(files, declared, {e.path: e for e in entries})
    manifest = RawManifest(files.capture, marker["kind"], tuple(entries))
    (dest / MANIFEST_FILE).write_text(manifest.to_json())
    return manifest


def _check_declared(files: CaptureFiles, declared: Any, actual: dict[str, FileEntry]) -> None:
    if not isinstance(declared, list):
        raise files.error(MARKER_FILE, "files must be a list", field="files")
    seen = {MARKER_FILE}
    for row, item in enumerate(declared, start=1):
        if not isinstance(item, dict) or not {"path", "bytes", "sha256"} <= set(item):
            raise files.error(
                MARKER_FILE, "entry needs path, bytes, sha256", field="files", row=row
            )
        rel = item["path"]
        files.path(rel, must_exist=False)
        entry = actual.get(rel)
        if entry is None:
            raise files.error(rel, "declared in the marker but missing", field="files", row=row)
        if entry.bytes != item["bytes"] or entry.sha256 != item["sha256"]:
            raise files.error(
                rel, "size or SHA-256 differs from the marker (incomplete upload?)", row=row
            )
        seen.add(rel)
    undeclared = sorted(set(actual) - seen)
    if undeclared:
        raise files.error(undeclared[0], "file is not declared in the marker", field="files")


def read_manifest(folder: Path) -> RawManifest:
    """The manifest of a raw copy."""
    return RawManifest.from_json((Path(folder) / MANIFEST_FILE).read_text())
