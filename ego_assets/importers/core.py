"""Land episodes of an existing dataset as ordinary captures (pure core, no Dagster).

One source episode becomes one capture folder in the landing zone, exactly what an
uploader would drop there, so the landing sensor, the gate, the exporters and the
catalog take it from there:

* the episode's files, byte for byte (renamed to the names the capture kind's reader
  expects), plus ``ego_provenance.json`` (`ego_assets.capture.provenance`: dataset,
  its version or the files' digests, licence text as given, original paths);
* the marker ``ego_capture.json`` declaring every file (size, SHA-256), written last.

Atomic: the folder is assembled and *read with the kind's reader* in a staging folder
first (``<landing>/.importing/`` on local disk, a temporary folder otherwise); a bad
episode raises `EpisodeImportError` naming dataset, episode, file, field and row, and
nothing of it reaches the landing zone. A good one appears whole: one rename on local
disk; on S3 every file is uploaded before the marker. Idempotent: an episode whose key
already has a marker in the landing zone or a raw copy is skipped, so re-running an
import lands only what is missing (and a half-written folder left by a killed run,
which has no marker, is replaced).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, TypeVar

from upath import UPath

from ego_assets.capture import read_capture, remember_landed
from ego_assets.capture.files import MARKER_FILE, MARKER_FORMAT, MARKER_VERSION
from ego_assets.capture.manifest import FileEntry, RawManifest
from ego_assets.capture.provenance import PROVENANCE_FILE, PROVENANCE_FORMAT, PROVENANCE_VERSION
from ego_assets.errors import CaptureFormatError
from ego_assets.fileio import file_sha256
from ego_assets.importers.listing import iter_after
from ego_assets.keys import MAX_KEY_LENGTH, validate_capture_key
from ego_assets.storage import RAW_MANIFEST_FILE, Storage, is_local, upload_tree
from ego_assets.trajectory.model import Trajectory

log = logging.getLogger(__name__)

STAGING_DIR = ".importing"  # below a local landing zone; not a capture key, never scanned
LICENCE_FILES = ("LICENSE", "LICENSE.txt", "LICENSE.md", "LICENCE", "LICENCE.txt", "licence.txt")
_CHUNK = 1 << 20


class EpisodeImportError(ValueError):
    """One source episode cannot be imported; nothing of it was landed.

    Names the dataset, the episode (its path in the source), the source file and, where
    known, the field (HDF5 dataset or attribute, array, key) and the 1-based row.
    """

    def __init__(
        self,
        dataset: str,
        episode: str,
        file: str,
        reason: str,
        *,
        field: str | None = None,
        row: int | None = None,
    ) -> None:
        self.dataset, self.episode, self.file = dataset, episode, file
        self.field, self.row, self.reason = field, row, reason
        where = [f"dataset {dataset!r}", f"episode {episode!r}", f"file {file!r}"]
        if field is not None:
            where.append(f"field {field!r}")
        if row is not None:
            where.append(f"row {row}")
        super().__init__(f"{', '.join(where)}: {reason}")


@dataclass(frozen=True, slots=True)
class Source:
    """Where a dataset is read from and what it says about itself.

    Attributes:
        root: the source folder or ``s3://`` prefix.
        text: the source as the user gave it (kept in the provenance).
        licence: licence text as given (a licence file of the source, or the importer's
            statement of the dataset's licence).
        dataset_version: the dataset's version when known; otherwise the provenance's
            file digests identify the content.
    """

    root: UPath
    text: str
    licence: str
    dataset_version: str | None = None


@dataclass(frozen=True, slots=True)
class SourceEpisode:
    """One episode of a source: the files that become one capture.

    Attributes:
        key: its capture key (`episode_key`).
        original_path: the episode's path relative to the source root (its anchor file).
        files: capture file name -> source file name relative to the source root.
        derive: for sources whose episodes share files (a merged LeRobot dataset, an HDF5
            file of many demos, WebDataset shards): writes the episode's own files into
            the staging folder and returns capture file name -> (source file, how it was
            made from it; "" for a byte-for-byte copy). Raises `ValueError` or `OSError`
            naming the problem; the episode then fails as a whole.
    """

    key: str
    original_path: str
    files: Mapping[str, str]
    derive: Callable[[Path], Mapping[str, tuple[str, str]]] | None = None


class Importer:
    """One kind of source. Subclasses set the class attributes and `episode`.

    The default `episodes` pages through the source in name order and makes one episode
    of every *anchor* file (`is_anchor`), finding its other files beside it.
    """

    kind: str = ""  # ``ego-assets import KIND``
    capture_kind: str = ""  # the marker kind its captures land as
    dataset: str = ""  # dataset name in the provenance and capture keys
    licence: str = ""  # statement used when the source carries no licence file

    def is_anchor(self, rel: str) -> bool:
        """Whether the source file ``rel`` starts an episode."""
        raise NotImplementedError

    def episode(self, source: Source, rel: str) -> SourceEpisode:
        """The episode anchored at ``rel`` (raises `EpisodeImportError` when incomplete)."""
        raise NotImplementedError

    def episodes(
        self, source: Source, after: str = ""
    ) -> Iterator[SourceEpisode | EpisodeImportError]:
        """Episodes whose anchor sorts after ``after``, in name order (lazily, paged).

        An episode whose files are incomplete comes as its `EpisodeImportError`.
        """
        for rel in iter_after(source.root, after):
            if self.is_anchor(rel):
                try:
                    yield self.episode(source, rel)
                except EpisodeImportError as exc:
                    yield exc

    def error(self, episode: str, file: str, reason: str, **where: Any) -> EpisodeImportError:
        return EpisodeImportError(self.dataset, episode, file, reason, **where)


@dataclass(frozen=True, slots=True)
class Landed:
    """What `land_episode` did: ``landed`` (with the trajectory read) or ``skipped``."""

    key: str
    status: str
    trajectory: Trajectory | None = None


@dataclass(slots=True)
class ImportSummary:
    """Outcome of one `import_source` pass; ``last`` is the last anchor examined."""

    landed: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failed: list[EpisodeImportError] = field(default_factory=list)
    last: str = ""


def episode_key(dataset: str, rel: str) -> str:
    """Capture key of the episode at ``rel`` (relative path, extension dropped).

    ``<dataset>-<path with / as .>``, other characters outside ``[A-Za-z0-9._-]`` as
    ``_``; when that changed the name or made it too long, a digest of ``rel`` is
    appended so two episodes never share a key.
    """
    stem = rel.rsplit(".", 1)[0] if "." in rel.rsplit("/", 1)[-1] else rel
    plain = f"{dataset}-{stem.replace('/', '.')}"
    safe = "".join(c if c.isascii() and (c.isalnum() or c in "._-") else "_" for c in plain)
    while ".." in safe:
        safe = safe.replace("..", "._")
    if safe != plain or len(safe) > MAX_KEY_LENGTH:
        digest = hashlib.sha256(rel.encode("utf-8", "surrogateescape")).hexdigest()[:12]
        safe = f"{safe[: MAX_KEY_LENGTH - 13]}-{digest}"
    return validate_capture_key(safe)


def open_source(
    text: str,
    importer: Importer,
    *,
    storage_options: Mapping[str, Any] | None = None,
    dataset_version: str | None = None,
    licence_text: str | None = None,
) -> Source:
    """The `Source` at ``text`` (folder or ``s3://`` prefix), its licence found.

    Licence: ``licence_text`` when given, else the first licence file at the source root
    (`LICENCE_FILES`), else the importer's statement.

    Raises:
        ValueError: the source does not exist (refused before anything is written).
    """
    root = Storage(text, storage_options=dict(storage_options or {})).root
    if not root.exists() or not root.is_dir():
        raise ValueError(f"import source {text!r} is not a folder or prefix")
    licence = licence_text
    if licence is None:
        for name in LICENCE_FILES:
            if (root / name).is_file():
                licence = (root / name).read_text(encoding="utf-8", errors="replace")
                break
    return Source(root, text, licence if licence is not None else importer.licence, dataset_version)


def local_root(source: Source, importer: Importer) -> Path:
    """The local folder of ``source`` (kinds whose episodes are cut out of shared files,
    with h5py, pyarrow or PyAV, read a local copy).

    Raises:
        ValueError: the source is not on local disk (refused before anything is written).
    """
    if not is_local(source.root):
        raise ValueError(
            f"import {importer.kind}: source {source.text!r} must be a local folder "
            "(copy it locally first)"
        )
    return Path(source.root.path)


T = TypeVar("T")


def skip_through(items: Iterable[T], after: str, name: Callable[[Any], str]) -> Iterator[T]:
    """``items`` after the one named ``after`` (all of them when ``after`` is empty or
    names none: landing is idempotent, so a stale cursor costs time, not duplicates).

    Errors (`EpisodeImportError`) are named by their episode.
    """
    pending: list[T] = []
    found = not after
    for item in items:
        label = item.episode if isinstance(item, EpisodeImportError) else name(item)
        if found:
            yield item
        elif label == after:
            found = True
        else:
            pending.append(item)
    if not found:
        yield from pending


# capture file -> (source file, how it was made from it; "" for a byte-for-byte copy)
Derived = dict[str, tuple[str, str]]


class CutImporter(Importer):
    """An importer whose episodes are cut out of files they share (`SourceEpisode.derive`).

    Subclasses implement `items`: every episode of a local source folder in a stable
    order, each an object with ``episode_id`` (its path, for the provenance and the key)
    and ``write(folder)`` (the ``derive`` of `SourceEpisode`), or an `EpisodeImportError`
    in place of what cannot land.
    """

    def items(self, root: Path) -> Iterator[Any]:
        raise NotImplementedError

    def episodes(
        self, source: Source, after: str = ""
    ) -> Iterator[SourceEpisode | EpisodeImportError]:
        items = self.items(local_root(source, self))
        for item in skip_through(items, after, lambda i: i.episode_id):
            if isinstance(item, EpisodeImportError):
                yield item
            else:
                key = episode_key(self.dataset, item.episode_id)
                yield SourceEpisode(key, item.episode_id, {}, derive=item.write)


def already_landed(storage: Storage, key: str) -> bool:
    """Whether ``key`` has a complete capture in the landing zone or a raw copy."""
    return (storage.landing_path(key) / MARKER_FILE).exists() or storage.exists(
        "raw", key, RAW_MANIFEST_FILE
    )


def land_episode(
    storage: Storage, importer: Importer, source: Source, episode: SourceEpisode
) -> Landed:
    """Land one episode as a capture in ``storage``'s landing zone (see the module docstring).

    Returns:
        ``Landed(status="landed", trajectory=...)`` (the trajectory its reader made of it)
        or ``Landed(status="skipped")`` when the key already has a capture.

    Raises:
        EpisodeImportError: a source file is missing or the reader refuses the episode.
    """
    key = validate_capture_key(episode.key)
    if already_landed(storage, key):
        return Landed(key, "skipped")
    local = is_local(storage.landing)
    if local:
        parent = Path(storage.landing.path) / STAGING_DIR
        parent.mkdir(parents=True, exist_ok=True)
        staging = parent / f"{key}.{uuid.uuid4().hex[:12]}"
        staging.mkdir()
    else:
        staging = Path(tempfile.mkdtemp(prefix="ego-import-"))
    try:
        trajectory = _assemble(importer, source, episode, staging)
        if local:
            published = _publish_local(staging, Path(storage.landing_path(key).path))
            if not published:
                return Landed(key, "skipped")
        else:
            upload_tree(staging, storage.landing_path(key), MARKER_FILE)
        return Landed(key, "landed", trajectory)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def import_source(
    storage: Storage,
    importer: Importer,
    source: Source,
    *,
    after: str = "",
    limit: int | None = None,
    examine: int | None = None,
    on_result: Callable[[str, str, str], None] | None = None,
) -> ImportSummary:
    """Land every episode of ``source`` not landed yet, in name order after ``after``.

    ``limit`` caps the episodes attempted (landed or failed; skipped ones are free);
    ``examine`` caps all episodes looked at, skipped ones included (a sensor tick's
    bound). A failing episode is recorded in ``failed`` and the others still land.
    ``on_result(status, key_or_episode, message)`` is called per episode. Resume with
    ``after=summary.last``.
    """
    summary = ImportSummary(last=after)
    for item in importer.episodes(source, after):
        attempted = len(summary.landed) + len(summary.failed)
        if limit is not None and attempted >= limit:
            break
        if examine is not None and attempted + len(summary.skipped) >= examine:
            break
        if isinstance(item, EpisodeImportError):
            summary.failed.append(item)
            summary.last = item.episode
            _tell(on_result, "failed", item.episode, str(item))
            continue
        summary.last = item.original_path
        try:
            result = land_episode(storage, importer, source, item)
        except EpisodeImportError as exc:
            summary.failed.append(exc)
            _tell(on_result, "failed", item.original_path, str(exc))
            continue
        (summary.landed if result.status == "landed" else summary.skipped).append(result.key)
        _tell(on_result, result.status, result.key, item.original_path)
    return summary


def _tell(on_result: Callable[[str, str, str], None] | None, *args: str) -> None:
    if on_result is not None:
        on_result(*args)


def _assemble(
    importer: Importer, source: Source, episode: SourceEpisode, staging: Path
) -> Trajectory:
    """Copy, describe and read the episode in ``staging``; its trajectory when it reads."""
    entries: list[dict[str, Any]] = []
    for rel, original in sorted(episode.files.items()):
        size, sha = _copy_hashing(importer, source, episode, original, staging / rel)
        entries.append({"path": rel, "original": original, "bytes": size, "sha256": sha})
    entries += _derived(importer, episode, staging)
    provenance = {
        "schema": PROVENANCE_FORMAT,
        "schema_version": PROVENANCE_VERSION,
        "importer": importer.kind,
        "dataset": importer.dataset,
        "dataset_version": source.dataset_version,
        "licence": source.licence,
        "source": source.text,
        "original_path": episode.original_path,
        "files": entries,
    }
    body = (json.dumps(provenance, indent=1, sort_keys=True) + "\n").encode("utf-8")
    (staging / PROVENANCE_FILE).write_bytes(body)
    declared = [{k: e[k] for k in ("path", "bytes", "sha256")} for e in entries]
    declared.append(
        {"path": PROVENANCE_FILE, "bytes": len(body), "sha256": hashlib.sha256(body).hexdigest()}
    )
    marker = {
        "format": MARKER_FORMAT,
        "version": MARKER_VERSION,
        "kind": importer.capture_kind,
        "files": sorted(declared, key=lambda e: str(e["path"])),
    }
    marker_path = staging / MARKER_FILE  # staging is private: published whole, marker last
    marker_body = (json.dumps(marker, indent=1, sort_keys=True) + "\n").encode()
    marker_path.write_bytes(marker_body)
    try:
        trajectory = read_capture(episode.key, staging)
    except CaptureFormatError as exc:
        originals = {str(e["path"]): str(e["original"]) for e in entries}
        original = originals.get(exc.file, exc.file)
        raise importer.error(
            episode.original_path, original, exc.reason, field=exc.field, row=exc.row
        ) from None
    os.utime(marker_path)  # the marker's time is its publication, not the read before it
    remember_landed(_manifest(episode.key, importer, declared, marker_body), trajectory)
    return trajectory


def _manifest(
    key: str, importer: Importer, declared: list[dict[str, Any]], marker: bytes
) -> RawManifest:
    """The `RawManifest` the raw copy of this landed capture will have (its files in
    `CaptureFiles.list_files` order, the marker included), without reading them again."""
    entries = [FileEntry(str(e["path"]), int(e["bytes"]), str(e["sha256"])) for e in declared]
    entries.append(FileEntry(MARKER_FILE, len(marker), hashlib.sha256(marker).hexdigest()))
    entries.sort(key=lambda e: PurePosixPath(e.path).parts)
    return RawManifest(key, importer.capture_kind, tuple(entries))


def _derived(importer: Importer, episode: SourceEpisode, staging: Path) -> list[dict[str, Any]]:
    """Run the episode's `SourceEpisode.derive` in ``staging``; provenance entries of its files."""
    if episode.derive is None:
        return []
    try:
        made = episode.derive(staging)
    except (ValueError, OSError) as exc:
        raise importer.error(episode.original_path, episode.original_path, str(exc)) from None
    entries = []
    for rel, (original, how) in sorted(made.items()):
        entry = {"path": rel, "original": original, "bytes": (staging / rel).stat().st_size}
        entry["sha256"] = file_sha256(staging / rel)
        if how:
            entry["derived"] = how
        entries.append(entry)
    return entries


def _copy_hashing(
    importer: Importer, source: Source, episode: SourceEpisode, original: str, dest: Path
) -> tuple[int, str]:
    """Copy ``source.root / original`` to ``dest``; (size, SHA-256) of the bytes copied."""
    digest = hashlib.sha256()
    size = 0
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        with (source.root / original).open("rb") as fin, dest.open("wb") as fout:
            while chunk := fin.read(_CHUNK):
                digest.update(chunk)
                fout.write(chunk)
                size += len(chunk)
    except FileNotFoundError:
        raise importer.error(episode.original_path, original, "file is missing") from None
    except IsADirectoryError:
        raise importer.error(episode.original_path, original, "is a folder, not a file") from None
    return size, digest.hexdigest()


def _publish_local(staging: Path, target: Path) -> bool:
    """Rename ``staging`` to ``target``; False when a complete capture is already there.

    A folder at ``target`` without a marker is a leftover of a killed upload or import
    and is replaced.
    """
    if target.exists():
        if (target / MARKER_FILE).exists():
            return False
        shutil.rmtree(target)
    try:
        os.rename(staging, target)
    except OSError:
        if (target / MARKER_FILE).exists():  # another importer landed it meanwhile
            return False
        raise
    return True
