"""The intake check of a capture, its immutable raw copy, and the copy's manifest.

`check_capture` is the one check every intake path runs (`ego-assets convert` and the
``raw_capture`` asset): the completion marker is valid; every name it declares stays
inside the capture folder (no absolute names, no ``..``); and, when it declares a file
list, exactly those files exist with those sizes and SHA-256 digests.

`copy_capture` runs the same check while copying the capture into the raw layout::

    raw/<key>/manifest.json     the platform's manifest (size and SHA-256 of every file)
    raw/<key>/capture/...       the capture's own files, byte for byte, names unchanged

Capture files live below `CAPTURE_DIR` and the platform's files beside it, so no name a
capture uses (its own ``manifest.json`` included) can collide with a platform file, and
readers of the raw copy (`raw_capture_dir`) see only the capture. The manifest's digest
(`RawManifest.content_sha256`) identifies the capture's content and is the data version
of everything derived from it.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from contextlib import ExitStack
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
from ego_assets.errors import CaptureFormatError
from ego_assets.fileio import file_sha256, write_file_atomic
from ego_assets.progress import report
from ego_assets.storage import RAW_CAPTURE_DIR, RAW_MANIFEST_FILE, raw_capture_dir
from ego_assets.trajectory.records import from_jsonable, to_jsonable

MANIFEST_FILE = RAW_MANIFEST_FILE
MANIFEST_VERSION = 2  # 2: capture files below capture/, the manifest beside them
CAPTURE_DIR = RAW_CAPTURE_DIR
HASH_TASK = "checking capture files (bytes)"
_CHUNK = 1 << 20
_SHA256_RE = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True, slots=True)
class FileEntry:
    """One raw file: relative POSIX path, size in bytes, SHA-256 hex digest."""

    path: str
    bytes: int
    sha256: str


@dataclass(frozen=True, slots=True)
class RawManifest:
    """What the raw copy of a capture holds (``version`` 2: files below `CAPTURE_DIR`)."""

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


def write_marker(folder: Path, kind: str) -> Path:
    """Write the completion marker of a capture folder, declaring every file in it.

    Call it last, after every other file is in place (what an uploader does). Only
    regular files are declared and hashed: a symlink anywhere in the folder is refused
    (`CaptureFormatError` naming it), never followed.
    """
    if kind not in CAPTURE_KINDS:
        raise ValueError(f"kind must be one of {CAPTURE_KINDS}, got {kind!r}")
    folder = Path(folder)
    entries = []
    for p in sorted(folder.rglob("*"), key=lambda q: q.relative_to(folder).as_posix()):
        rel = p.relative_to(folder).as_posix()
        if p.is_symlink():
            raise CaptureFormatError(
                folder.name, rel, "is a symlink; the marker declares regular files only"
            )
        if p.is_file() and rel != MARKER_FILE:
            entries.append(
                {
                    "path": rel,
                    "bytes": p.stat().st_size,
                    "sha256": file_sha256(p, follow_symlinks=False),
                }
            )
    marker = {"format": MARKER_FORMAT, "version": MARKER_VERSION, "kind": kind, "files": entries}
    text = json.dumps(marker, indent=1, sort_keys=True) + "\n"
    return write_file_atomic(folder / MARKER_FILE, text.encode("utf-8"))


def check_capture(files: CaptureFiles, copy_to: Path | None = None) -> RawManifest:
    """Check a capture against its completion marker, copying it to ``copy_to`` if given.

    Every file is read once; with ``copy_to`` the bytes hashed are the bytes copied, so
    the copy is exactly what was checked. Hashing progress is reported as `HASH_TASK`.

    Returns:
        The manifest of the capture (every file, the marker included).

    Raises:
        CaptureFormatError: missing or bad marker, a declared name that is absolute or
            escapes the folder, a symlink leaving it, or files that differ from the
            marker's list (missing, undeclared, other size or digest), each named.
    """
    marker = read_marker(files)
    declared = _declared_files(files, marker.get("files"))
    names = files.list_files()
    paths = {rel: files.path(rel, must_exist=False) for rel in names}
    if declared is not None:
        _check_names(files, declared, names)
    total = sum(p.stat().st_size for p in paths.values())
    done = 0

    def advance(n: int) -> None:
        nonlocal done
        done += n
        report(HASH_TASK, done, total)

    entries = []
    for rel, path in paths.items():
        target = None if copy_to is None else copy_to / rel
        size, sha = _read_hashing(path, target, advance)
        if declared is not None and rel in declared:
            row, want_size, want_sha = declared[rel]
            if (size, sha) != (want_size, want_sha):
                what = "size" if size != want_size else "SHA-256"
                message = (
                    f"{what} differs from the marker (file changed after the marker was "
                    "written, or an incomplete upload)"
                )
                raise files.error(rel, message, field="files", row=row)
        entries.append(FileEntry(rel, size, sha))
    return RawManifest(files.capture, marker["kind"], tuple(entries))


def copy_capture(files: CaptureFiles, dest: Path) -> RawManifest:
    """Check and copy the capture into ``dest`` (a fresh staging folder) in the raw layout.

    The capture's files go below ``dest/capture/`` and the manifest to
    ``dest/manifest.json`` (see the module docstring).

    Raises:
        CaptureFormatError: whatever `check_capture` refuses.
    """
    manifest = check_capture(files, raw_capture_dir(Path(dest)))
    (Path(dest) / MANIFEST_FILE).write_text(manifest.to_json())
    return manifest


def read_manifest(folder: Path) -> RawManifest:
    """The manifest of the raw copy ``folder`` (``raw/<key>``)."""
    return RawManifest.from_json((Path(folder) / MANIFEST_FILE).read_text())


def _read_hashing(src: Path, dest: Path | None, advance: Callable[[int], None]) -> tuple[int, str]:
    """Size and SHA-256 of ``src``, written to ``dest`` as it is read when given.

    One read serves the digest, the copy and the progress (per MiB): `fileio.file_sha256`
    would read a copied file a second time and report no progress."""
    digest = hashlib.sha256()
    size = 0
    with ExitStack() as stack:
        fin = stack.enter_context(src.open("rb"))
        fout = None
        if dest is not None:
            dest.parent.mkdir(parents=True, exist_ok=True)
            fout = stack.enter_context(dest.open("wb"))
        while chunk := fin.read(_CHUNK):
            digest.update(chunk)
            if fout is not None:
                fout.write(chunk)
            size += len(chunk)
            advance(len(chunk))
    return size, digest.hexdigest()


def _declared_files(files: CaptureFiles, declared: Any) -> dict[str, tuple[int, int, str]] | None:
    """Declared path -> (row, bytes, sha256), every name checked before anything is read."""
    if declared is None:
        return None
    if not isinstance(declared, list):
        raise files.error(MARKER_FILE, "files must be a list", field="files")
    out: dict[str, tuple[int, int, str]] = {}
    for row, item in enumerate(declared, start=1):
        path = item.get("path") if isinstance(item, dict) else None
        size = item.get("bytes") if isinstance(item, dict) else None
        sha = item.get("sha256") if isinstance(item, dict) else None
        if (
            not isinstance(path, str)
            or not isinstance(size, int)
            or isinstance(size, bool)
            or size < 0
            or not isinstance(sha, str)
            or not _SHA256_RE.fullmatch(sha)
        ):
            message = "entry needs path (text), bytes (integer >= 0), sha256 (64 hex digits)"
            raise files.error(MARKER_FILE, message, field="files", row=row)
        files.path(path, must_exist=False)  # refuses absolute names, '..', escaping links
        if path == MARKER_FILE:
            raise files.error(
                MARKER_FILE, "the marker cannot declare itself", field="files", row=row
            )
        if path in out:
            raise files.error(path, "declared twice in the marker", field="files", row=row)
        out[path] = (row, size, sha)
    return out


def _check_names(
    files: CaptureFiles, declared: dict[str, tuple[int, int, str]], names: list[str]
) -> None:
    present = set(names)
    for rel, (row, _, _) in declared.items():
        if rel not in present:
            raise files.error(rel, "declared in the marker but missing", field="files", row=row)
    undeclared = sorted(present - set(declared) - {MARKER_FILE})
    if undeclared:
        raise files.error(undeclared[0], "file is not declared in the marker", field="files")
