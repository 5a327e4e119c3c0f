"""LeRobot v3 in (``kind = lerobot-v3``): every episode of a v3.0 dataset is one capture.

A source is a LeRobot v3 dataset folder (``meta/info.json``) or a folder holding several
(a CERES ``shards/`` folder: one dataset per episode), found by their ``meta/info.json``
in sorted order. Before any episode lands, each dataset's ``info.json`` is checked against
its Parquet: ``total_episodes`` against the episodes metadata, ``total_frames`` against
the episodes' lengths, and every data file's columns, dtypes and widths against
``features``. A disagreement is one error naming the file, the dataset and the field; the
episodes it concerns do not land, the others do.

Each episode lands as a ``lerobot_v3`` capture (`ego_assets.capture.lerobot_v3`), itself
a one-episode v3 dataset:

* a dataset of one episode (a CERES shard) is copied byte for byte;
* an episode of a merged dataset gets ``meta/info.json`` with its own totals and file
  locations, ``meta/tasks.parquet`` and ``meta/stats.json`` byte for byte, its
  episodes-metadata row, its rows of the data file (same schema and values), and per
  camera its frames ``[from_timestamp, to_timestamp)`` of the video file: packets copied
  when the cut starts on a keyframe and the packets of those frames are contiguous in
  decode order (no decoding, no quality loss), else decoded and re-encoded (H.264,
  lerobot's settings); a CERES merged dataset's per-episode sidecar
  (``ceres/episodes/...``) becomes ``ceres/episode-metadata.json``.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ego_assets.capture.lerobot_v3 import (
    CERES_METADATA,
    EPISODES_DIR,
    INFO_FILE,
    Feature,
    parse_features,
    schema_problem,
)
from ego_assets.formats import lerobot_video
from ego_assets.importers.core import CutImporter, Derived, EpisodeImportError

KIND = "lerobot-v3"
MARKER_KIND = "lerobot_v3"
DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
VIDEO_PATH = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
EPISODE_ROW = "meta/episodes/chunk-000/file-000.parquet"
LOCATION = {"chunk_index": 0, "file_index": 0}


@dataclass(frozen=True, slots=True)
class Dataset:
    """One LeRobot v3 dataset of the source.

    Attributes:
        root: its folder; rel: the folder relative to the source root ("." for the root).
        info: ``meta/info.json``; features: its parsed features.
        episodes: the episodes-metadata rows, in episode order.
        bad_files: data file (relative) -> the error of its schema check.
    """

    root: Path
    rel: str
    info: dict[str, Any]
    features: dict[str, Feature]
    episodes: list[dict[str, Any]]
    bad_files: dict[str, EpisodeImportError] = field(default_factory=dict)

    def data_file(self, episode: dict[str, Any]) -> str:
        return str(self.info.get("data_path") or DATA_PATH).format(
            chunk_index=int(episode.get("data/chunk_index", 0)),
            file_index=int(episode.get("data/file_index", 0)),
        )

    def video_file(self, key: str, episode: dict[str, Any]) -> str:
        return str(self.info.get("video_path") or VIDEO_PATH).format(
            video_key=key,
            chunk_index=int(episode.get(f"videos/{key}/chunk_index", 0)),
            file_index=int(episode.get(f"videos/{key}/file_index", 0)),
        )


@dataclass(frozen=True, slots=True)
class LeRobotEpisode:
    """One episode of a dataset: what lands as one capture."""

    dataset: Dataset
    row: dict[str, Any]

    @property
    def index(self) -> int:
        return int(self.row["episode_index"])

    @property
    def episode_id(self) -> str:
        return _join(self.dataset.rel, f"episode_{self.index:06d}")

    def write(self, out: Path) -> Derived:
        """Write the capture's files (not the marker) into the empty folder ``out``;
        capture file -> (source file, how it was made; "" for a byte-for-byte copy)."""
        if len(self.dataset.episodes) == 1:
            shutil.copytree(self.dataset.root, out, dirs_exist_ok=True)
            return {
                p.relative_to(out).as_posix(): (
                    _join(self.dataset.rel, p.relative_to(out).as_posix()),
                    "",
                )
                for p in sorted(out.rglob("*"))
                if p.is_file()
            }
        return _write_cut(self, Path(out))


def _join(dataset: str, rel: str) -> str:
    return rel if dataset == "." else f"{dataset}/{rel}"


def _error(dataset: str, file: str, field_name: str, problem: str) -> EpisodeImportError:
    """An error naming the dataset (its folder in the source), the file and the field."""
    return EpisodeImportError(
        KIND, dataset, _join(dataset, file), problem, field=field_name or None
    )


def find_datasets(src: Path) -> list[Path]:
    """Every LeRobot dataset folder below ``src`` (``src`` itself included), sorted."""
    src = Path(src)
    return sorted(p.parent.parent for p in src.rglob("info.json") if p.parent.name == "meta")


def open_dataset(root: Path, rel: str) -> Dataset:
    """Read and check one dataset's metadata (see the module docstring).

    Raises:
        EpisodeImportError: ``info.json`` unreadable or disagreeing with the episodes metadata.
    """
    try:
        info = json.loads((root / INFO_FILE).read_text(encoding="utf-8"))
        features = parse_features(info)
    except (OSError, ValueError) as exc:
        raise _error(rel, INFO_FILE, "features", str(exc)) from None
    version = info.get("codebase_version")
    if not isinstance(version, str) or not version.startswith("v3."):
        raise _error(rel, INFO_FILE, "codebase_version", f"{version!r}, expected v3.x")
    files = sorted((root / EPISODES_DIR).glob("*/*.parquet"))
    if not files:
        raise _error(rel, f"{EPISODES_DIR}/", "episode_index", "no episodes metadata")
    episodes = [r for f in files for r in pq.read_table(f).to_pylist()]
    if info.get("total_episodes") != len(episodes):
        raise _error(
            rel,
            INFO_FILE,
            "total_episodes",
            f"{info.get('total_episodes')!r}, the episodes metadata lists {len(episodes)}",
        )
    frames = sum(int(e.get("length", 0)) for e in episodes)
    if info.get("total_frames") != frames:
        raise _error(
            rel,
            INFO_FILE,
            "total_frames",
            f"{info.get('total_frames')!r}, the episodes' lengths sum to {frames}",
        )
    dataset = Dataset(root, rel, info, features, episodes)
    for data_rel in sorted({dataset.data_file(e) for e in episodes}):
        path = root / data_rel
        try:
            problem = schema_problem(features, pq.read_schema(path))
        except (OSError, pa.ArrowException) as exc:
            dataset.bad_files[data_rel] = _error(rel, data_rel, "", f"unreadable: {exc}")
            continue
        if problem is not None:
            dataset.bad_files[data_rel] = _error(
                rel, data_rel, problem[0], f"{problem[1]} (meta/info.json)"
            )
        else:
            _check_rows(dataset, data_rel, path)
    return dataset


def _check_rows(dataset: Dataset, data_rel: str, path: Path) -> None:
    """Each episode's row count in the data file equals its ``length``."""
    index = pq.read_table(path, columns=["episode_index"]).column("episode_index").to_numpy()
    found = dict(zip(*np.unique(index, return_counts=True), strict=True))
    for e in dataset.episodes:
        if dataset.data_file(e) == data_rel and found.get(e["episode_index"], 0) != e["length"]:
            dataset.bad_files[data_rel] = _error(
                dataset.rel,
                data_rel,
                "episode_index",
                f"episode {e['episode_index']} has {found.get(e['episode_index'], 0)} rows, "
                f"its metadata says length {e['length']}",
            )
            return


def iter_episodes(src: Path) -> Iterator[LeRobotEpisode | EpisodeImportError]:
    """Every episode of every dataset below ``src``; what cannot land yields its error."""
    src = Path(src)
    for root in find_datasets(src):
        rel = root.relative_to(src).as_posix() if root != src else "."
        try:
            dataset = open_dataset(root, rel)
        except EpisodeImportError as exc:
            yield exc
            continue
        for row in dataset.episodes:
            episode = LeRobotEpisode(dataset, row)
            bad = dataset.bad_files.get(dataset.data_file(row))
            if bad is None:
                yield episode
            else:
                yield EpisodeImportError(
                    KIND, episode.episode_id, bad.file, bad.reason, field=bad.field
                )


class LeRobotV3Importer(CutImporter):
    """``ego-assets import lerobot-v3 SRC``: every episode of every v3 dataset of SRC."""

    kind = KIND
    capture_kind = MARKER_KIND
    dataset = KIND
    licence = "not stated by the source (no licence file at its root)"

    def items(self, root: Path) -> Iterator[LeRobotEpisode | EpisodeImportError]:
        return iter_episodes(root)


def _write_cut(episode: LeRobotEpisode, out: Path) -> Derived:
    """A one-episode dataset of ``episode`` (merged source) in ``out``; what each file is."""
    ds, row = episode.dataset, dict(episode.row)
    n = episode.index
    made: Derived = {
        DATA_PATH.format(**LOCATION): (_join(ds.rel, ds.data_file(row)), f"the rows of episode {n}")
    }
    fps = int(ds.info["fps"])
    table = pq.read_table(ds.root / ds.data_file(row))
    table = table.filter(pa.array(table.column("episode_index").to_numpy() == episode.index))
    (out / "data/chunk-000").mkdir(parents=True)
    pq.write_table(table, out / DATA_PATH.format(**LOCATION))
    row.update(
        {
            "data/chunk_index": 0,
            "data/file_index": 0,
            "meta/episodes/chunk_index": 0,
            "meta/episodes/file_index": 0,
        }
    )
    for key, feature in ds.features.items():
        if feature.dtype != "video":
            continue
        start = float(row.get(f"videos/{key}/from_timestamp", 0.0))
        target = out / VIDEO_PATH.format(video_key=key, **LOCATION)
        target.parent.mkdir(parents=True)
        first, count = round(start * fps), int(row["length"])
        source_video = ds.video_file(key, row)
        copied = cut_video(ds.root / source_video, target, first, count, fps)
        how = "packets copied" if copied else "decoded and re-encoded (H.264)"
        made[target.relative_to(out).as_posix()] = (
            _join(ds.rel, source_video),
            f"frames {first}..{first + count - 1} of episode {n}, {how}",
        )
        row.update(
            {
                f"videos/{key}/chunk_index": 0,
                f"videos/{key}/file_index": 0,
                f"videos/{key}/from_timestamp": 0.0,
                f"videos/{key}/to_timestamp": int(row["length"]) / fps,
            }
        )
    source_row = pq.read_table(_episodes_file(ds, episode.index))
    (out / EPISODE_ROW).parent.mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist([row], schema=source_row.schema), out / EPISODE_ROW)
    made[EPISODE_ROW] = (_join(ds.rel, EPISODES_DIR), f"the row of episode {n}, files renumbered")
    made[INFO_FILE] = (_join(ds.rel, INFO_FILE), f"totals and splits of episode {n} alone")
    info = dict(
        ds.info,
        total_episodes=1,
        total_frames=int(row["length"]),
        splits={"train": f"{episode.index}:{episode.index + 1}"},
    )
    (out / INFO_FILE).write_text(json.dumps(info, indent=4) + "\n", encoding="utf-8")
    for rel in ("meta/tasks.parquet", "meta/stats.json"):
        if (ds.root / rel).is_file():
            shutil.copyfile(ds.root / rel, out / rel)
            made[rel] = (_join(ds.rel, rel), "")
    sidecar = _ceres_sidecar(ds, episode.index)
    if sidecar is not None:
        (out / CERES_METADATA).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(sidecar, out / CERES_METADATA)
        made[CERES_METADATA] = (_join(ds.rel, sidecar.relative_to(ds.root).as_posix()), "")
    return made


def _episodes_file(ds: Dataset, index: int) -> Path:
    for f in sorted((ds.root / EPISODES_DIR).glob("*/*.parquet")):
        if index in pq.read_table(f, columns=["episode_index"]).column("episode_index").to_pylist():
            return f
    raise _error(ds.rel, EPISODES_DIR, "episode_index", f"episode {index} not found")


def _ceres_sidecar(ds: Dataset, index: int) -> Path | None:
    """The CERES metadata of episode ``index`` of a merged CERES dataset, if any."""
    merge = ds.root / "ceres/merge.json"
    if not merge.is_file():
        return None
    doc = json.loads(merge.read_text(encoding="utf-8"))
    for entry in doc.get("episodes", []):
        shard = entry.get("shard")
        if entry.get("episode_index") == index and isinstance(shard, str) and "/" not in shard:
            path = ds.root / "ceres/episodes" / f"{shard}.json"
            return path if path.is_file() and not path.is_symlink() else None
    return None


def cut_video(src: Path, dst: Path, first: int, count: int, fps: int) -> bool:
    """Frames ``first .. first + count - 1`` (presentation order) of ``src`` into the mp4
    ``dst``, frame ``k`` at ``k / fps``. Returns True when the packets were copied.

    Raises:
        ValueError: ``src`` holds fewer frames than asked for.
    """
    info = lerobot_video.inspect_video(src)
    if first < 0 or first + count > info.frames:
        raise ValueError(
            f"{src.name}: frames {first}..{first + count - 1} asked, it holds {info.frames}"
        )
    frames = info.packet_frames
    inside = (frames >= first) & (frames < first + count)
    picked = np.flatnonzero(inside)
    copyable = (
        info.uniform
        and info.codec in lerobot_video.REMUX_CODECS
        and len(frames) == info.frames
        and first in set(info.keyframes.tolist())
        and len(picked) == count
        and picked[-1] - picked[0] + 1 == count
    )
    if copyable:
        _copy_packets(src, dst, info, first, count, fps)
    else:
        _reencode(src, dst, first, count, fps, info)
    return bool(copyable)


def _copy_packets(
    src: Path, dst: Path, info: lerobot_video.SourceVideo, first: int, count: int, fps: int
) -> None:
    offset, step = info.pts_offset, info.pts_step
    out_tb = Fraction(1, fps)
    opts = lerobot_video.MUX_OPTIONS
    with av.open(str(src)) as inp, av.open(str(dst), "w", format="mp4", options=opts) as out:
        ist = inp.streams.video[0]
        # opaque: the codec parameters as they are (an AV1 stream opens with the libdav1d
        # decoder, which is no encoder to look up)
        ost = out.add_stream_from_template(ist, opaque=True)
        ost.time_base = out_tb
        for packet in inp.demux(ist):
            if not packet.size or packet.pts is None:
                continue
            index = (packet.pts - offset) // step
            if not first <= index < first + count:
                continue
            dts = packet.dts if packet.dts is not None else packet.pts
            packet.pts, packet.dts = index - first, (dts - offset) // step - first
            packet.duration, packet.time_base, packet.stream = 1, out_tb, ost
            out.mux(packet)


def _reencode(
    src: Path, dst: Path, first: int, count: int, fps: int, info: lerobot_video.SourceVideo
) -> None:
    with (
        av.open(str(src)) as inp,
        av.open(str(dst), "w", format="mp4", options=lerobot_video.MUX_OPTIONS) as out,
    ):
        ist = inp.streams.video[0]
        ost = lerobot_video.add_encoder_stream(out, fps, info.width, info.height)
        for k, frame in enumerate(inp.decode(ist)):
            if k >= first + count:
                break
            if k >= first:
                lerobot_video.encode_frame(
                    out, ost, frame.reformat(format="yuv420p"), k - first, fps
                )
        out.mux(ost.encode(None))
