"""The release manifest ``release.json`` and the diff between two versions.

A manifest holds no write time: two builds of the same inputs give the same bytes. Its
``inputs_sha256`` is the SHA-256 of the canonical JSON of what the packed files are a
function of (release name, packer version, spec, packing options, each episode's record,
the episodes left out): a build whose inputs hash equals the latest version's writes
nothing.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ego_assets.fileio import file_sha256, json_bytes

MANIFEST_FILE = "release.json"
MANIFEST_FORMAT = "ego-assets-release"


def canonical(value: Any) -> bytes:
    """``value`` as canonical JSON bytes (sorted keys, no spaces)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def inputs_sha256(inputs: dict[str, Any]) -> str:
    """SHA-256 of the canonical JSON of a build's inputs."""
    return hashlib.sha256(canonical(inputs)).hexdigest()


def file_records(
    folder: Path,
    known: tuple[Path, list[dict[str, Any]]] | None = None,
    hashed: Mapping[str, tuple[int, str]] | None = None,
) -> list[dict[str, Any]]:
    """Every file below ``folder`` except the manifest: ``{path, bytes, sha256}``, path
    relative (POSIX), in path order. ``known``: (an earlier version's folder, its
    manifest ``files``): a file that is a hard link to that folder's file at the same
    path takes its recorded digest instead of being read. ``hashed``: path -> (bytes,
    SHA-256) of files the packers hashed as they wrote them (WebDataset shards, the
    LeRobot receipts' files): taken as is when the size agrees, not read again."""
    folder = Path(folder)
    files = sorted(p for p in folder.rglob("*") if p.is_file() and p.name != MANIFEST_FILE)
    earlier, records = known if known is not None else (None, [])
    recorded = {r["path"]: r for r in records}
    hashed = hashed or {}
    out = []
    unread: list[tuple[dict[str, Any], Path]] = []
    for p in files:
        path = p.relative_to(folder).as_posix()
        stat = p.stat()
        record = recorded.get(path)
        if earlier is not None and record is not None:
            old = (earlier / path).stat() if (earlier / path).is_file() else None
            if old is not None and (old.st_ino, old.st_dev) == (stat.st_ino, stat.st_dev):
                out.append(dict(record))
                continue
        size, digest = hashed.get(path, (-1, ""))
        out.append({"path": path, "bytes": stat.st_size, "sha256": digest})
        if size != stat.st_size:
            unread.append((out[-1], p))
    # hashing releases the GIL: two files at a time
    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="release-hash") as pool:
        for entry, digest in zip(
            (e for e, _ in unread), pool.map(file_sha256, (p for _, p in unread)), strict=True
        ):
            entry["sha256"] = digest
    return out


def manifest_bytes(manifest: dict[str, Any]) -> bytes:
    """How ``release.json`` is written: indented, sorted keys, a final newline."""
    return json_bytes(manifest, indent=1, sort_keys=True) + b"\n"


def _changes(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Why episode record ``old`` became ``new`` (empty: unchanged)."""
    why = []
    if old["split"] != new["split"]:
        why.append(f"split {old['split']} -> {new['split']}")
    if old["trajectory_digest"] != new["trajectory_digest"]:
        why.append("trajectory changed (new digest)")
    for fmt in sorted(set(old["exports"]) | set(new["exports"])):
        a, b = old["exports"].get(fmt), new["exports"].get(fmt)
        if a is None or b is None:
            why.append(f"{fmt}: {'added to' if a is None else 'removed from'} the release")
        elif a["code_version"] != b["code_version"]:
            why.append(f"{fmt} re-exported: code {a['code_version']} -> {b['code_version']}")
        elif a["sha256"] != b["sha256"]:
            why.append(f"{fmt} re-exported: new bytes (same code version)")
    og, ng = old["gate"], new["gate"]
    if og["decision"] != ng["decision"]:
        why.append(f"gate {og['decision']} -> {ng['decision']}")
    if og["quality"] != ng["quality"]:
        why.append(f"quality {og['quality']} -> {ng['quality']}")
    if og["waivers"] != ng["waivers"]:
        granted = len(ng["waivers"]) - len(og["waivers"])
        why.append(
            f"waivers changed ({len(og['waivers'])} -> {len(ng['waivers'])}"
            + (", revoked" if granted < 0 else "")
            + ")"
        )
    elif og["policy_version"] != ng["policy_version"]:
        why.append(f"export policy {og['policy_version']} -> {ng['policy_version']}")
    return why


def _space_line(actions: dict[str, Any] | None) -> str:
    """One line of a manifest's spec ``actions`` (absent: ``source``)."""
    if not actions or actions.get("space", "source") == "source":
        return "source"
    keys = (
        *("frame", "hands", "rotation", "horizon"),
        *("relative", "gripper_close_m", "gripper_open_m", "fps"),
    )
    return f"{actions['space']} (" + ", ".join(f"{k} {actions.get(k)}" for k in keys) + ")"


def spec_changes(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """What changed in the release as a whole from manifest ``a`` to ``b``: the action
    space (every episode's packed vectors change with it)."""
    old, new = a["spec"].get("actions"), b["spec"].get("actions")
    if old == new:
        return []
    return [f"action space {_space_line(old)} -> {_space_line(new)}"]


def diff_manifests(a: dict[str, Any], b: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Episodes added, removed and changed from manifest ``a`` to ``b``, each with why.

    Returns:
        ``{"added": [{capture_key, split, why}], "removed": [...], "changed": [...]}``
        in capture-key order; ``why`` is a list of short sentences.
    """
    old = {e["capture_key"]: e for e in a["episodes"]}
    new = {e["capture_key"]: e for e in b["episodes"]}
    left_out = {e["capture_key"]: e["reason"] for e in b.get("left_out", [])}
    added = [
        {"capture_key": k, "split": new[k]["split"], "why": ["selected and exported"]}
        for k in sorted(new.keys() - old.keys())
    ]
    removed = [
        {
            "capture_key": k,
            "split": old[k]["split"],
            "why": [f"left out: {left_out[k]}" if k in left_out else "no longer selected"],
        }
        for k in sorted(old.keys() - new.keys())
    ]
    changed = []
    for k in sorted(old.keys() & new.keys()):
        why = _changes(old[k], new[k])
        if why:
            changed.append({"capture_key": k, "split": new[k]["split"], "why": why})
    return {"added": added, "removed": removed, "changed": changed}
