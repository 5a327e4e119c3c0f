"""Read and check EgoSmith WebDataset output: shards, episode folders, packed datasets.

`validate_path` walks a shard, an episode folder (``episode.json``) or a packed dataset
(``manifest.json``) and checks every sample: member names and types (plain files named
``<key>.<ext>``, no folders or links), the key pattern, every member decodes (JPEG,
``.npy`` with the documented dtype and shape, JSON with every meta field), the key
agrees with the meta, absent hands are zeros, each action equals the next frame's state,
and the index file's sample counts and SHA-256 match the shard files.
"""

from __future__ import annotations

import io
import json
import tarfile
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ego_assets.fileio import file_sha256
from ego_assets.formats import egosmith_constants
from ego_assets.formats.egosmith_webdataset import EPISODE_FILE, FORMAT, MANIFEST_FILE, parse_key

MAX_ERRORS = 50


@dataclass
class Sample:
    """One decoded sample.

    Attributes:
        key: sample key; episode / frame parsed from it.
        image: (H, W, 3) uint8 RGB.
        lowdim: (116,) float32.
        mano: (2, K) float32.
        meta: the meta.json object.
        depth: (H, W) float32 metres, or None.
    """

    key: str
    dataset: str
    episode: int
    frame: int
    image: np.ndarray
    lowdim: np.ndarray
    mano: np.ndarray
    meta: dict[str, Any]
    depth: np.ndarray | None = None


@dataclass
class Report:
    """What `validate_path` found: counts per episode and every problem (capped)."""

    path: str
    shards: list[str] = field(default_factory=list)
    samples: int = 0
    episodes: Counter = field(default_factory=Counter)
    splits: Counter = field(default_factory=Counter)
    presence: Counter = field(default_factory=Counter)
    errors: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors and self.samples > 0

    def error(self, text: str) -> None:
        if len(self.errors) < MAX_ERRORS:
            self.errors.append(text)


def raw_samples(shard: Path, report: Report) -> Iterator[tuple[str, dict[str, bytes]]]:
    """(key, {extension: bytes}) per sample of a shard, in file order (streaming).

    Members that are not plain files, have unsafe names or unknown extensions are
    reported into ``report`` and left out.
    """
    with tarfile.open(shard, mode="r|") as tar:
        key, members = "", dict[str, bytes]()
        for info in tar:
            where = f"{shard.name}: member {info.name!r}"
            if not info.isfile():
                report.error(f"{where}: not a regular file (type {info.type!r})")
                continue
            if "/" in info.name or "\\" in info.name or info.name.startswith("."):
                report.error(f"{where}: unsafe name (path separator or leading dot)")
                continue
            stem, _, ext = info.name.partition(".")
            if ext not in egosmith_constants.EXTENSIONS:
                report.error(f"{where}: unknown extension {ext!r}")
                continue
            if stem != key and members:
                yield key, members
                members = {}
            key = stem
            if ext in members:
                report.error(f"{where}: duplicate member")
            fh = tar.extractfile(info)
            members[ext] = fh.read() if fh is not None else b""
        if members:
            yield key, members


def _npy(data: bytes) -> np.ndarray:
    return np.load(io.BytesIO(data), allow_pickle=False)


def decode_sample(key: str, members: dict[str, bytes]) -> Sample:
    """Decode one sample's members; ValueError naming the member that fails."""
    import simplejpeg

    missing = [ext for ext in egosmith_constants.REQUIRED_EXTENSIONS if ext not in members]
    if missing:
        raise ValueError(f"sample {key}: missing {', '.join(missing)}")
    dataset, episode, frame = parse_key(key)
    try:
        image = simplejpeg.decode_jpeg(members["image.jpg"], colorspace="RGB")
    except ValueError as exc:
        raise ValueError(f"sample {key}: image.jpg does not decode: {exc}") from None
    lowdim, mano = _npy(members["lowdim.npy"]), _npy(members["mano.npy"])
    if lowdim.dtype != np.float32 or lowdim.shape != (egosmith_constants.LOWDIM_DIM,):
        raise ValueError(f"sample {key}: lowdim.npy is {lowdim.dtype} {lowdim.shape}")
    if mano.dtype != np.float32 or mano.ndim != 2 or mano.shape[0] != 2:
        raise ValueError(f"sample {key}: mano.npy is {mano.dtype} {mano.shape}, not (2, K)")
    meta = json.loads(members["meta.json"])
    depth = _npy(members["depth.npy"]) if "depth.npy" in members else None
    if depth is not None and (depth.dtype != np.float32 or depth.ndim != 2):
        raise ValueError(f"sample {key}: depth.npy is {depth.dtype} {depth.shape}")
    return Sample(key, dataset, episode, frame, image, lowdim, mano, meta, depth)


def iter_shard(shard: Path) -> Iterator[Sample]:
    """Decoded samples of one shard, in file order (raises on the first problem)."""
    report = Report(str(shard))
    for key, members in raw_samples(Path(shard), report):
        if report.errors:
            raise ValueError(report.errors[0])
        yield decode_sample(key, members)
    if report.errors:
        raise ValueError(report.errors[0])


def check_sample(sample: Sample) -> list[str]:
    """Problems of one decoded sample (empty when it follows the format)."""
    meta, key = sample.meta, sample.key
    problems = [
        f"sample {key}: meta.json lacks {f!r}"
        for f in egosmith_constants.META_FIELDS
        if f not in meta
    ]
    if problems:
        return problems
    has_depth_meta = any(f in meta for f in egosmith_constants.DEPTH_META_FIELDS)
    if (has_depth_meta or sample.depth is not None) and (
        sample.depth is None or any(f not in meta for f in egosmith_constants.DEPTH_META_FIELDS)
    ):
        problems.append(f"sample {key}: depth.npy and depth_schema/depth_encoding go together")
    expected = {
        "dataset_name": sample.dataset,
        "episode_index": sample.episode,
        "lowdim_schema": egosmith_constants.LOWDIM_SCHEMA,
        "wrist_translation_semantics": egosmith_constants.WRIST_TRANSLATION_SEMANTICS,
        "camera_extrinsic_convention": egosmith_constants.CAMERA_EXTRINSIC_CONVENTION,
    }
    if "frame_index" in meta:
        expected["frame_index"] = sample.frame
    for name, value in expected.items():
        if meta[name] != value:
            problems.append(f"sample {key}: meta {name} is {meta[name]!r}, expected {value!r}")
    if meta["instruction_num"] != len(meta["instruction"]):
        problems.append(f"sample {key}: instruction_num does not count instruction")
    if meta["presence"] not in (0, 1, 2, 3):
        problems.append(f"sample {key}: presence {meta['presence']!r} not in 0..3")
    if not np.isfinite(sample.lowdim).all():
        problems.append(f"sample {key}: lowdim.npy has non-finite values")
    for bit, side in (
        (egosmith_constants.PRESENCE_LEFT, "left"),
        (egosmith_constants.PRESENCE_RIGHT, "right"),
    ):
        if int(meta["presence"]) & bit:
            continue
        values = hand_values(sample.lowdim[egosmith_constants.STATE], side)
        if np.any(values != 0):
            problems.append(f"sample {key}: {side} hand absent but its state is not zero")
    return problems


def hand_values(state: np.ndarray, side: str) -> np.ndarray:
    """Every value of one hand in a 48-d state (wrist_state + hand_state)."""
    wrist = state[egosmith_constants.WRIST_STATE]
    tips = state[egosmith_constants.HAND_STATE]
    if side == "left":
        parts = (
            wrist[egosmith_constants.LEFT_TRANS],
            wrist[egosmith_constants.LEFT_ROT6D],
            tips[egosmith_constants.LEFT_TIPS],
        )
    else:
        parts = (
            wrist[egosmith_constants.RIGHT_TRANS],
            wrist[egosmith_constants.RIGHT_ROT6D],
            tips[egosmith_constants.RIGHT_TIPS],
        )
    return np.concatenate(parts)


def _check_actions(prev: Sample, cur: Sample | None, report: Report) -> None:
    """The action of ``prev`` is the state of ``cur`` (its next frame), or its own if last."""
    if cur is not None and cur.episode == prev.episode and cur.frame > prev.frame:
        target, what = cur.lowdim[egosmith_constants.STATE], f"state of {cur.key}"
    elif prev.meta.get("last_frame", True):
        target, what = prev.lowdim[egosmith_constants.STATE], "its own state (last frame)"
    else:
        return  # the next frame is in another shard
    if not np.array_equal(prev.lowdim[egosmith_constants.ACTION], target):
        report.error(f"sample {prev.key}: action is not the {what}")


def validate_shard(shard: Path, report: Report) -> None:
    """Check every sample of ``shard`` into ``report``."""
    report.shards.append(Path(shard).name)
    prev: Sample | None = None
    try:
        for key, members in raw_samples(Path(shard), report):
            try:
                sample = decode_sample(key, members)
            except ValueError as exc:
                report.error(f"{Path(shard).name}: {exc}")
                continue
            for problem in check_sample(sample):
                report.error(f"{Path(shard).name}: {problem}")
            if prev is not None:
                _check_actions(prev, sample, report)
            report.samples += 1
            report.episodes[sample.episode] += 1
            report.splits[str(sample.meta.get("split", ""))] += 1
            report.presence[int(sample.meta.get("presence", 0))] += 1
            prev = sample
    except (tarfile.TarError, OSError) as exc:
        report.error(f"{Path(shard).name}: unreadable tar: {exc}")
    if prev is not None:
        _check_actions(prev, None, report)


def _check_index(folder: Path, entries: list[dict[str, Any]], report: Report) -> None:
    listed = {e["name"] for e in entries}
    on_disk = {p.name for p in folder.glob("shard-*.tar")}
    for name in sorted(on_disk - listed):
        report.error(f"{folder.name}: {name} is not in the index file")
    for entry in entries:
        path = folder / entry["name"]
        if not path.is_file():
            report.error(f"{folder.name}: {entry['name']} listed but missing")
        elif file_sha256(path) != entry["sha256"]:
            report.error(f"{folder.name}: {entry['name']} SHA-256 differs from the index")


def is_egosmith_path(path: Path) -> bool:
    """Whether ``path`` is a ``.tar`` shard or a folder of shards / episode / dataset."""
    path = Path(path)
    if path.is_file():
        return path.suffix == ".tar"
    if not path.is_dir():
        return False
    for index in (EPISODE_FILE, MANIFEST_FILE):  # other formats have a manifest.json too
        if (path / index).is_file():
            try:
                return json.loads((path / index).read_text()).get("format") == FORMAT
            except (ValueError, AttributeError):
                return False
    return any(path.glob("shard-*.tar"))


def validate_path(path: Path) -> Report:
    """Check a shard, an episode folder or a packed dataset folder (see the module docstring)."""
    path = Path(path)
    report = Report(str(path))
    if path.is_file():
        validate_shard(path, report)
        return report
    if not path.is_dir():
        report.error(f"{path}: no such shard or folder")
        return report
    expected: Counter = Counter()
    if (path / MANIFEST_FILE).exists():
        manifest = json.loads((path / MANIFEST_FILE).read_text())
        _check_index(path, manifest["shards"], report)
        expected = Counter({e["episode_index"]: e["samples"] for e in manifest["episodes"]})
    elif (path / EPISODE_FILE).exists():
        summary = json.loads((path / EPISODE_FILE).read_text())
        if summary["status"] == "skipped":
            report.error(f"{path.name}: episode skipped: {summary['reason']}")
            return report
        _check_index(path, summary["shards"], report)
        expected = Counter({summary["episode_index"]: summary["samples"]})
    shards = sorted(path.glob("shard-*.tar"))
    if not shards:
        report.error(f"{path}: no shard-*.tar files")
    for shard in shards:
        validate_shard(shard, report)
    if expected and expected != report.episodes:
        report.error(
            f"{path.name}: samples per episode {dict(report.episodes)} != index {dict(expected)}"
        )
    return report


def format_report(report: Report) -> str:
    """Human-readable summary: per-episode counts, splits, presence, problems."""
    lines = [
        f"{report.path}: {len(report.shards)} shards, {report.samples} samples, "
        f"{len(report.episodes)} episodes",
    ]
    for episode, count in sorted(report.episodes.items()):
        lines.append(f"  episode {episode:06d}: {count} samples")
    if report.splits:
        lines.append(
            "  splits: " + ", ".join(f"{k or '-'}={v}" for k, v in sorted(report.splits.items()))
        )
    if report.presence:
        names = {0: "none", 1: "left", 2: "right", 3: "both"}
        lines.append(
            "  hands present: "
            + ", ".join(f"{names[k]}={v}" for k, v in sorted(report.presence.items()))
        )
    lines.append("  valid" if report.ok else f"  INVALID: {len(report.errors)} problems")
    lines.extend(f"    {e}" for e in report.errors)
    return "\n".join(lines)
