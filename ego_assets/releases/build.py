"""Building a release version ``releases/<name>/v<N>/`` and reading versions back.

`build_release` selects the episodes (`select.select_episodes`), and, under the release
folder's writer lock, compares the inputs' hash with the latest version's manifest: equal
means nothing is written; otherwise ``v<N+1>`` is packed in a hidden temporary folder
beside it and renamed into place once ``release.json`` (written last) is complete. A
version folder is never changed after that. Local data roots only for now.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ego_assets.catalog.warehouse import catalog_database
from ego_assets.formats.egosmith_webdataset import DEFAULT_SHARD_BYTES
from ego_assets.releases.card import CARD_FILE, dataset_card
from ego_assets.releases.lerobot import pack_lerobot
from ego_assets.releases.manifest import (
    MANIFEST_FILE,
    MANIFEST_FORMAT,
    file_records,
    inputs_sha256,
    manifest_bytes,
)
from ego_assets.releases.robomimic import pack_robomimic
from ego_assets.releases.select import select_episodes
from ego_assets.releases.spec import RELEASES_DIR, load_spec, spec_path
from ego_assets.releases.webdataset import pack_webdataset
from ego_assets.storage import Storage
from ego_assets.trajectory.store import atomic_directory, remove_leftovers

RELEASE_WRITER_VERSION = "release-1"
VERSION_RE = re.compile(r"^v([1-9][0-9]*)$")


class ReleaseError(ValueError):
    """A release that cannot be built or read (one line naming the release and the cause)."""


@dataclass(frozen=True, slots=True)
class BuildResult:
    """The version a build ended on and whether this build wrote it."""

    version: int
    path: Path
    written: bool
    manifest: dict[str, Any]


def release_dir(root: Path, name: str) -> Path:
    """``<root>/releases/<name>/``: the release's versions."""
    return Path(root) / RELEASES_DIR / name


def versions(root: Path, name: str) -> list[int]:
    """The finished versions of release ``name``, ascending (a version's folder exists only
    once complete: it is renamed into place)."""
    folder = release_dir(root, name)
    if not folder.is_dir():
        return []
    found = (VERSION_RE.fullmatch(p.name) for p in folder.iterdir())
    return sorted(int(m.group(1)) for m in found if m)


def read_manifest(root: Path, name: str, version: int | str) -> dict[str, Any]:
    """The manifest of ``v<version>`` (``version``: 3, "3" or "v3")."""
    import json

    text = str(version)
    match = VERSION_RE.fullmatch(text if text.startswith("v") else f"v{text}")
    if match is None:
        raise ReleaseError(f"release {name}: {version!r} is not a version (v1, v2, ...)")
    path = release_dir(root, name) / match.group(0) / MANIFEST_FILE
    if not path.is_file():
        have = ", ".join(f"v{v}" for v in versions(root, name)) or "none"
        raise ReleaseError(f"release {name}: no version {match.group(0)} (versions: {have})")
    return dict(json.loads(path.read_text()))


def build_release(
    data: str | Path,
    name: str,
    spec_file: Path | None = None,
    *,
    shard_bytes: int = DEFAULT_SHARD_BYTES,
) -> BuildResult:
    """Build release ``name`` of the data root ``data`` (see the module docstring).

    Args:
        data: local data root (its catalog must be built).
        name: release name.
        spec_file: the spec; default ``<data>/releases/<name>.toml``.
        shard_bytes: WebDataset shard size limit, bytes (a sample never straddles two).

    Raises:
        SpecError, SelectionError, ReleaseError: a bad spec, a failed query, nothing
            selected, an S3 root; nothing is written then.
    """
    storage = Storage(data)
    if not storage.is_local:
        raise ReleaseError(f"release {name}: only local data roots are supported for now")
    root = Path(storage.root.path)
    spec = load_spec(spec_file or spec_path(root, name), name)
    with catalog_database(storage, write=False) as database:
        selection = select_episodes(database, spec)
    if not selection.episodes:
        reasons = "; ".join(f"{e['capture_key']}: {e['reason']}" for e in selection.left_out[:5])
        raise ReleaseError(
            f"release {name}: the spec selects no exported episode"
            + (f" (left out: {reasons})" if reasons else "")
        )
    splits = [s for s, _ in spec.split.fractions]
    inputs = {
        "release": name,
        "writer_version": RELEASE_WRITER_VERSION,
        "spec": spec.to_json(),
        "packing": {"webdataset_shard_bytes": shard_bytes},
        "episodes": [e.record() for e in selection.episodes],
        "left_out": selection.left_out,
    }
    digest = inputs_sha256(inputs)
    folder = release_dir(root, name)
    folder.mkdir(parents=True, exist_ok=True)
    with storage.writer_lock(folder):
        have = versions(root, name)
        if have:
            latest = read_manifest(root, name, have[-1])
            if latest.get("inputs_sha256") == digest:
                return BuildResult(have[-1], folder / f"v{have[-1]}", False, latest)
        number = (have[-1] if have else 0) + 1
        target = folder / f"v{number}"
        remove_leftovers(target)
        with atomic_directory(target) as tmp:
            formats: dict[str, Any] = {}
            if "webdataset" in spec.formats:
                index = pack_webdataset(root, selection.episodes, splits, tmp, shard_bytes)
                formats["webdataset"] = {"index": "webdataset/index.json", **index["splits"]}
            if "robomimic" in spec.formats:
                formats["robomimic"] = pack_robomimic(root, selection.episodes, splits, tmp)
            if "lerobot" in spec.formats:
                formats["lerobot"] = pack_lerobot(root, selection.episodes, splits, tmp, digest)
            manifest = {
                "format": MANIFEST_FORMAT,
                "version": number,
                "inputs_sha256": digest,
                **inputs,
                "licence": spec.licence,
                "splits": {
                    s: {
                        "episodes": sum(1 for e in selection.episodes if e.split == s),
                        "duration_s": sum(
                            e.duration_s or 0.0 for e in selection.episodes if e.split == s
                        ),
                    }
                    for s in splits
                },
                "formats": formats,
            }
            (tmp / CARD_FILE).write_text(dataset_card(manifest), encoding="utf-8")
            manifest["files"] = file_records(tmp)
            (tmp / MANIFEST_FILE).write_bytes(manifest_bytes(manifest))
    return BuildResult(number, target, True, manifest)
