"""Building a release version ``releases/<name>/v<N>/`` and reading versions back.

`build_release` selects the episodes (`select.select_episodes`), and, under the release
folder's writer lock, compares the inputs' hash with the latest version's manifest: equal
means nothing is written; otherwise ``v<N+1>`` is packed in a hidden temporary folder
beside it and renamed into place once ``release.json`` (written last) is complete. A
version folder is never changed after that. Local data roots only for now.

A new version reuses what it can of the latest one (`layout`): the files of parts whose
episodes are unchanged are hard-links to the latest version's (immutable) files, and
their SHA-256 is taken from its manifest, not read again. `rebuild_release` packs a
version again from its manifest alone (its episodes, splits and parts, not a new
selection) and checks every file against the manifest's SHA-256.
"""

from __future__ import annotations

import re
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ego_assets.actions import ActionSpace
from ego_assets.catalog.receipts import artefact_digest
from ego_assets.catalog.warehouse import catalog_database
from ego_assets.formats.egosmith_webdataset import DEFAULT_SHARD_BYTES
from ego_assets.releases.apart import PROCESS_MIN_EPISODES, run_apart
from ego_assets.releases.card import CARD_FILE, dataset_card
from ego_assets.releases.consent import apply_withdrawals, load_withdrawals
from ego_assets.releases.derived import SourceNotes, describe_json
from ego_assets.releases.layout import PartPlan, plan_parts
from ego_assets.releases.lerobot import pack_lerobot, receipt_digests
from ego_assets.releases.manifest import (
    MANIFEST_FILE,
    MANIFEST_FORMAT,
    file_records,
    inputs_sha256,
    manifest_bytes,
)
from ego_assets.releases.robomimic import FOLDER as ROBOMIMIC_FOLDER
from ego_assets.releases.robomimic import linked_export_digests, pack_robomimic
from ego_assets.releases.select import ReleaseEpisode, SelectionResult, select_episodes
from ego_assets.releases.spec import RELEASES_DIR, ReleaseSpec, actions_of, load_spec, spec_path
from ego_assets.releases.webdataset import FOLDER as WEBDATASET_FOLDER
from ego_assets.releases.webdataset import pack_webdataset
from ego_assets.storage import Storage
from ego_assets.trajectory.store import atomic_directory, remove_leftovers

RELEASE_WRITER_VERSION = "release-2"  # bump when packed bytes or the layout change
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


def _pack_version(
    root: Path,
    tmp: Path,
    head: dict[str, Any],
    episodes: list[ReleaseEpisode],
    plan: PartPlan,
    previous_files: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Pack the formats of manifest ``head`` into ``tmp``, write the card and
    ``release.json``; return the manifest. ``previous_files``: the manifest ``files`` of
    ``plan.previous`` (digests of linked files are taken from it)."""
    spec = head["spec"]
    splits = list(spec["split"]["fractions"])
    wanted = spec["release"]["formats"]
    space = actions_of(spec)  # `source` keeps every format's own vectors and bytes
    notes = SourceNotes()
    known = None
    if plan.previous is not None and previous_files is not None:
        known = (plan.previous, previous_files)
    # the formats write folders of their own: packed side by side (their C work, file I/O
    # and hashing run outside the GIL; a large WebDataset copy and robomimic packing in
    # processes of their own),
    # the first error in format order raised
    with ThreadPoolExecutor(max_workers=3, thread_name_prefix="release-pack") as pool:
        jobs: dict[str, Future[Any]] = {}
        if "webdataset" in wanted:
            shard_bytes = head["packing"]["webdataset_shard_bytes"]
            args = (root, episodes, splits, tmp, shard_bytes, plan, space)
            if len(episodes) >= PROCESS_MIN_EPISODES:
                jobs["webdataset"] = pool.submit(run_apart, pack_webdataset, *args)
            else:
                jobs["webdataset"] = pool.submit(pack_webdataset, *args)
        if "robomimic" in wanted:
            robomimic = (root, episodes, splits, tmp, plan, known, space)
            if len(episodes) >= PROCESS_MIN_EPISODES:
                # opening each episode file (and deriving) is Python work an episode:
                # apart, off the merge's GIL
                jobs["robomimic"] = pool.submit(run_apart, _pack_robomimic_hashed, *robomimic)
            else:
                jobs["robomimic"] = pool.submit(_pack_robomimic_hashed, *robomimic)
        if "lerobot" in wanted:
            jobs["lerobot"] = pool.submit(
                pack_lerobot,
                root,
                episodes,
                splits,
                tmp,
                head["inputs_sha256"],
                plan,
                space,
                notes,
            )
        done = {fmt: job.result() for fmt, job in jobs.items()}
    formats: dict[str, Any] = {}
    hashed: dict[str, tuple[int, str]] = {}  # files hashed while packed: not read again
    if "webdataset" in done:
        index = done["webdataset"]
        formats["webdataset"] = {"index": "webdataset/index.json", **index["splits"]}
        for shard in index["shards"]:
            hashed[f"{WEBDATASET_FOLDER}/{shard['path']}"] = (shard["bytes"], shard["sha256"])
    if "robomimic" in done:
        formats["robomimic"], digests, robomimic_notes = done["robomimic"]
        hashed.update(digests)
        notes.merge(robomimic_notes)
    if "lerobot" in done:
        formats["lerobot"] = done["lerobot"]
        hashed.update(receipt_digests(tmp, formats["lerobot"]))
    manifest = {**head, "formats": formats}
    if space.derived:  # a `source` manifest is as before the action spaces
        if "webdataset" in done:
            notes.merge(done["webdataset"]["actions"]["sources"])
        manifest["actions"] = {
            **describe_json(space),
            "state_names": list(space.state_names()),
            "action_names": list(space.action_names()),
            "sources": notes.to_json(),
        }
    (tmp / CARD_FILE).write_text(dataset_card(manifest), encoding="utf-8")
    manifest["files"] = file_records(tmp, known, hashed)
    (tmp / MANIFEST_FILE).write_bytes(manifest_bytes(manifest))
    return manifest


def _pack_robomimic_hashed(
    root: Path,
    episodes: list[ReleaseEpisode],
    splits: list[str],
    tmp: Path,
    plan: PartPlan,
    known: tuple[Path, list[dict[str, Any]]] | None,
    space: ActionSpace | None = None,
) -> tuple[dict[str, Any], dict[str, tuple[int, str]], dict[str, Any]]:
    """`pack_robomimic`, then (bytes, SHA-256) of its files (path below ``tmp``) as
    `file_records` takes them: hashed on the robomimic thread, which is done long before
    the LeRobot merge (its episode files are links, packed in no time), not after it,
    a link to an export taking the export's digest (`linked_export_digests`); and its
    `SourceNotes` (a derived space) as JSON."""
    notes = SourceNotes()
    packed = pack_robomimic(root, episodes, splits, tmp, plan, space, notes)
    prefix = f"{ROBOMIMIC_FOLDER}/"
    if known is not None:  # the previous version's robomimic files, paths below its folder
        earlier, records = known
        known = (
            earlier / ROBOMIMIC_FOLDER,
            [
                {**r, "path": r["path"][len(prefix) :]}
                for r in records
                if r["path"].startswith(prefix)
            ],
        )
    linked = linked_export_digests(root, episodes, tmp)
    records = file_records(tmp / ROBOMIMIC_FOLDER, known, linked)
    digests = {f"{prefix}{r['path']}": (r["bytes"], r["sha256"]) for r in records}
    return packed, digests, notes.to_json()


def latest_manifest(root: Path, name: str) -> dict[str, Any] | None:
    """The manifest of the latest version of release ``name`` (None: no version yet)."""
    have = versions(root, name)
    return read_manifest(root, name, have[-1]) if have else None


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
    selection = apply_withdrawals(selection, load_withdrawals(root), latest_manifest(root, name))
    return build_version(storage, spec, selection, shard_bytes=shard_bytes)


def build_version(
    storage: Storage,
    spec: ReleaseSpec,
    selection: SelectionResult,
    *,
    shard_bytes: int = DEFAULT_SHARD_BYTES,
) -> BuildResult:
    """`build_release` after the selection: the version of ``spec`` over ``selection``
    (nothing written when the latest version has the same inputs)."""
    root = Path(storage.root.path)
    name = spec.name
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
        latest = read_manifest(root, name, have[-1]) if have else None
        if latest is not None and latest.get("inputs_sha256") == digest:
            return BuildResult(have[-1], folder / f"v{have[-1]}", False, latest)
        number = (have[-1] if have else 0) + 1
        same_packer = (
            latest is not None
            and all(latest.get(k) == inputs[k] for k in ("writer_version", "packing"))
            and latest["spec"].get("actions") == spec.to_json().get("actions")
        )
        plan = plan_parts(
            selection.episodes,
            number,
            latest if same_packer else None,
            folder / f"v{have[-1]}" if have else None,
        )
        head = {
            "format": MANIFEST_FORMAT,
            "version": number,
            "inputs_sha256": digest,
            **inputs,
            "licence": spec.licence,
            "notes": selection.notes,
            "splits": {
                s: {
                    "episodes": sum(1 for e in selection.episodes if e.split == s),
                    "duration_s": sum(
                        e.duration_s or 0.0 for e in selection.episodes if e.split == s
                    ),
                }
                for s in splits
            },
            "parts": plan.parts,
        }
        target = folder / f"v{number}"
        remove_leftovers(target)
        with atomic_directory(target) as tmp:
            manifest = _pack_version(
                root, tmp, head, selection.episodes, plan, latest["files"] if latest else None
            )
    return BuildResult(number, target, True, manifest)


def rebuild_release(
    data: str | Path, name: str, version: int | str, out: Path | None = None
) -> Path:
    """Pack version ``version`` of release ``name`` again from its ``release.json`` alone
    (its episodes, splits and parts; the catalog is not read) into ``out`` (default: the
    version's own folder, which must then be missing), and check every file.

    Each episode's exports are checked against the manifest's SHA-256 first, and every
    packed file (``release.json`` included) against the manifest after; on any
    difference nothing is left at ``out``.

    Raises:
        ReleaseError: no such version, a version made by another packer, ``out`` exists,
            an export changed or is gone, or a packed file differs (each named).
    """
    root = Path(Storage(data).root.path)
    manifest = read_manifest(root, name, version)
    number = manifest["version"]
    where = f"release {name} v{number}"
    if manifest.get("writer_version") != RELEASE_WRITER_VERSION or "parts" not in manifest:
        raise ReleaseError(
            f"{where}: packed by {manifest.get('writer_version')}; this packer "
            f"({RELEASE_WRITER_VERSION}) cannot rebuild it byte for byte"
        )
    target = Path(out) if out is not None else release_dir(root, name) / f"v{number}"
    if target.exists():
        raise ReleaseError(f"{where}: {target} exists; give --out a new folder")
    episodes = [ReleaseEpisode(**record) for record in manifest["episodes"]]
    for episode in episodes:
        for fmt, export in episode.exports.items():
            path = root / export["path"]
            if not path.exists():
                raise ReleaseError(f"{where}: capture {episode.capture_key}: {fmt}: {path} is gone")
            if artefact_digest(path)[2] != export["sha256"]:
                raise ReleaseError(
                    f"{where}: capture {episode.capture_key}: {fmt}: {path} changed since "
                    "the release (SHA-256 differs from the manifest)"
                )
    head = {k: v for k, v in manifest.items() if k not in ("formats", "files")}
    target.parent.mkdir(parents=True, exist_ok=True)
    remove_leftovers(target)
    with atomic_directory(target) as tmp:
        again = _pack_version(root, tmp, head, episodes, PartPlan(manifest["parts"]))
        want = {f["path"]: f for f in manifest["files"]}
        got = {f["path"]: f for f in again["files"]}
        differ = sorted(p for p in want.keys() | got.keys() if want.get(p) != got.get(p))
        if differ or manifest_bytes(again) != manifest_bytes(manifest):
            raise ReleaseError(
                f"{where}: rebuilt files differ from the manifest: "
                + (", ".join(differ[:5]) or MANIFEST_FILE)
            )
    return target
