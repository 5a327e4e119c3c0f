"""Reader for ``lerobot_v3`` captures: one episode of a LeRobotDataset v3.0.

The capture folder (landed by ``ego-assets import lerobot-v3``) is itself a LeRobot v3
dataset holding exactly one episode: ``meta/info.json``, ``meta/episodes/*/*.parquet``
(the episode's row), ``meta/tasks.parquet``, the data file and one mp4 per camera named
by the ``info.json`` templates, and, for a CERES shard, its ``ceres/`` sidecars. A
one-episode source (a CERES shard) lands byte for byte; an episode of a merged dataset
lands as its own rows and its own frames of each video (see `ego_assets.importers.lerobot_v3`).

Streams (every one on the episode's row clock, ``fps`` from ``info.json``):

* a CERES-named 410-value ``observation.state`` (`STATE_NAMES`) maps back to ``head``
  (pose: ``valid`` = ``head.tracked``) and ``hand_left`` / ``hand_right`` (``webxr25``
  with rotation and radius; ``hand_valid`` = ``<side>_hand.tracked``; a joint is valid
  when its hand is tracked and its eight values are not all zero, the export's rule for
  untracked joints), float32 values widened to float64; the CERES ``action`` becomes
  ``pinch`` (NaN where the hand is untracked); ``ceres.source_*`` become
  ``recorder_slots`` (slot index, gap, source time);
* every other numeric feature (``observation.state`` of a robot, ``action``, any other
  column) is kept by its ``info.json`` name as a ``vector`` stream whose ``names`` are the
  feature's names;
* each video feature is a `MediaRef` with a ``media_frames`` stream (frame ``k`` of the
  episode at ``from_timestamp + k / fps`` of its file).

Time: ``ceres.source_timestamp`` when present (seconds since the capture start; the
recorder's monotonic clock for a WebXR source, made relative to the first row), else the
``timestamp`` column. LeRobot keeps no epoch, so the capture's ``clock`` is ``device``
and ``timestamp_ns`` counts from 0 at the capture start.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ego_assets.capture.files import CaptureFiles
from ego_assets.capture.holos_hdf5 import imported_files
from ego_assets.capture.media import probe_video
from ego_assets.formats.ceres_episode import ACTION_NAMES, HAND_WIDTH, STATE_NAMES, hand_offset
from ego_assets.trajectory.joints import JOINT_SETS
from ego_assets.trajectory.model import (
    Annotations,
    CameraCalibration,
    CaptureInfo,
    Characteristic,
    FileRef,
    MediaRef,
    Segment,
    StudyInfo,
    Trajectory,
)
from ego_assets.trajectory.streams import AttrValue, Stream, make_stream

log = logging.getLogger(__name__)

SOURCE_KIND = "lerobot-v3"
INFO_FILE = "meta/info.json"
TASKS_FILE = "meta/tasks.parquet"
EPISODES_DIR = "meta/episodes"
CERES_METADATA = "ceres/episode-metadata.json"
DEFAULT_COLUMNS = ("timestamp", "frame_index", "episode_index", "index", "task_index")
CERES_STATE, CERES_ACTION = "observation.state", "action"
CERES_SOURCE = ("ceres.source_frame_index", "ceres.source_timestamp", "ceres.source_gap")
SIDES = ("left", "right")
_DTYPES = {
    "float32": pa.float32(),
    "float64": pa.float64(),
    "float16": pa.float16(),
    "int64": pa.int64(),
    "int32": pa.int32(),
    "int16": pa.int16(),
    "int8": pa.int8(),
    "uint8": pa.uint8(),
    "bool": pa.bool_(),
}
_NOT_COLUMNS = ("video", "image")


@dataclass(frozen=True, slots=True)
class Feature:
    """One ``info.json`` feature: key, dtype, shape, component names (or empty)."""

    key: str
    dtype: str
    shape: tuple[int, ...]
    names: tuple[str, ...]

    @property
    def width(self) -> int:
        return int(np.prod(self.shape)) if self.shape else 1


def parse_features(info: Mapping[str, Any]) -> dict[str, Feature]:
    """The ``features`` of an ``info.json`` document (ValueError naming the bad one)."""
    features = info.get("features")
    if not isinstance(features, dict) or not features:
        raise ValueError("field 'features': missing or empty")
    out = {}
    for key, spec in features.items():
        if not isinstance(spec, dict) or not isinstance(spec.get("dtype"), str):
            raise ValueError(f"field 'features.{key}': no dtype")
        shape = spec.get("shape")
        if not isinstance(shape, list) or not all(isinstance(s, int) and s > 0 for s in shape):
            raise ValueError(f"field 'features.{key}.shape': {shape!r} is not a list of sizes")
        names = spec.get("names")
        if isinstance(names, dict):  # older datasets: {"motors": [...]}
            names = next(iter(names.values()), None)
        flat = tuple(str(n) for n in names) if isinstance(names, list) else ()
        out[key] = Feature(key, spec["dtype"], tuple(shape), flat)
    return out


def schema_problem(features: Mapping[str, Feature], schema: pa.Schema) -> tuple[str, str] | None:
    """(field, problem) where a data file's Arrow ``schema`` disagrees with ``features``.

    Every non-video feature must be a column of its dtype, with ``shape[0]`` values per
    row (a list column) or one (a scalar column); every column must be a feature.
    """
    columns = {f.name: f.type for f in schema}
    for key, feature in features.items():
        if feature.dtype in _NOT_COLUMNS:
            continue
        if key not in columns:
            return key, "declared in info.json but not a column of the data file"
        arrow = columns[key]
        width = None
        if pa.types.is_fixed_size_list(arrow):
            width, arrow = arrow.list_size, arrow.value_type
        elif pa.types.is_list(arrow) or pa.types.is_large_list(arrow):
            arrow = arrow.value_type
        expected = _DTYPES.get(feature.dtype)
        if expected is not None and arrow != expected:
            return key, f"info.json says {feature.dtype}, the data file has {columns[key]}"
        if width is not None and width != feature.width:
            return key, f"info.json says shape {list(feature.shape)}, the data file {width} values"
    extra = sorted(set(columns) - set(features))
    if extra:
        return extra[0], "a column of the data file that info.json does not declare"
    return None


def column_values(table: pa.Table, feature: Feature) -> np.ndarray:
    """(N, width) array of one feature's column (list or scalar), the file's dtype."""
    column = table.column(feature.key).combine_chunks()
    n = len(column)
    if pa.types.is_fixed_size_list(column.type) or pa.types.is_list(column.type):
        values = column.flatten().to_numpy(zero_copy_only=False)
        if len(values) != n * feature.width:
            raise ValueError(f"{len(values)} values in {n} rows, shape {list(feature.shape)}")
        return values.reshape(n, feature.width)
    return column.to_numpy(zero_copy_only=False).reshape(n, 1)


def read_lerobot_v3(files: CaptureFiles, marker: Mapping[str, Any]) -> Trajectory:
    """Read a ``lerobot_v3`` capture folder into the canonical `Trajectory`.

    Raises:
        CaptureFormatError: naming the file and field (``info.json`` that disagrees with
            its Parquet, a missing data or video file, more than one episode...).
    """
    return _Reader(files).trajectory()


class _Reader:
    def __init__(self, files: CaptureFiles) -> None:
        self.files = files
        self.info = files.read_json(INFO_FILE)
        if not isinstance(self.info, dict):
            raise files.error(INFO_FILE, "expected a JSON object")
        version = self.info.get("codebase_version")
        if not isinstance(version, str) or not version.startswith("v3."):
            raise files.error(
                INFO_FILE, f"codebase_version {version!r}, expected v3.x", field="codebase_version"
            )
        fps = self.info.get("fps")
        if isinstance(fps, bool) or not isinstance(fps, int | float) or not fps > 0:
            raise files.error(INFO_FILE, f"fps {fps!r} must be a positive number", field="fps")
        self.fps = float(fps)
        try:
            self.features = parse_features(self.info)
        except ValueError as exc:
            raise files.error(INFO_FILE, str(exc), field="features") from None
        self.episode = self._episode()
        self.metadata = self._ceres_metadata()

    def _parquet(self, rel: str) -> pa.Table:
        try:
            return pq.read_table(self.files.path(rel))
        except (pa.ArrowException, OSError) as exc:
            raise self.files.error(rel, f"unreadable Parquet: {exc}") from None

    def _episode(self) -> dict[str, Any]:
        rels = sorted(
            p
            for p in self.files.list_files()
            if p.startswith(f"{EPISODES_DIR}/") and p.endswith(".parquet")
        )
        if not rels:
            raise self.files.error(f"{EPISODES_DIR}/", "no episodes metadata file")
        rows = [row for rel in rels for row in self._parquet(rel).to_pylist()]
        if len(rows) != 1:
            raise self.files.error(
                rels[0], f"a capture is one episode; found {len(rows)}", field="episode_index"
            )
        total = self.info.get("total_episodes")
        if total != 1:
            raise self.files.error(
                INFO_FILE,
                f"total_episodes is {total!r}, the episodes metadata lists 1",
                field="total_episodes",
            )
        return rows[0]

    def _ceres_metadata(self) -> dict[str, Any]:
        if not self.files.exists(CERES_METADATA):
            return {}
        doc = self.files.read_json(CERES_METADATA)
        return doc if isinstance(doc, dict) else {}

    def _path(self, template_key: str, default: str, **loc: Any) -> str:
        template = self.info.get(template_key) or default
        try:
            return str(template).format(**loc)
        except (KeyError, IndexError, ValueError) as exc:
            raise self.files.error(INFO_FILE, f"path template: {exc}", field=template_key) from None

    # ------------------------------------------------------------------ rows

    def _rows(self) -> tuple[pa.Table, str]:
        ep = self.episode
        rel = self._path(
            "data_path",
            "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet",
            chunk_index=int(ep.get("data/chunk_index", 0)),
            file_index=int(ep.get("data/file_index", 0)),
        )
        table = self._parquet(rel)
        problem = schema_problem(self.features, table.schema)
        if problem is not None:
            raise self.files.error(rel, f"{problem[1]} ({INFO_FILE})", field=problem[0])
        index = table.column("episode_index").to_numpy()
        table = table.filter(pa.array(index == int(ep["episode_index"])))
        length = int(ep.get("length", table.num_rows))
        if table.num_rows != length:
            raise self.files.error(
                rel,
                f"{table.num_rows} rows of episode "
                f"{ep['episode_index']}, its metadata says {length}",
                field="episode_index",
            )
        if self.info.get("total_frames") != length:
            raise self.files.error(
                INFO_FILE,
                f"total_frames is {self.info.get('total_frames')!r},"
                f" the data file holds {length} rows",
                field="total_frames",
            )
        return table, rel

    def _time(self, table: pa.Table) -> np.ndarray:
        if "ceres.source_timestamp" in table.column_names:
            t = table.column("ceres.source_timestamp").to_numpy().astype(np.float64)
            if self.metadata.get("episode", {}).get("source_kind") == "webxr" and len(t):
                t = t - t[0]  # the recorder's monotonic clock: the first slot starts the capture
            return t
        return table.column("timestamp").to_numpy().astype(np.float64)

    def trajectory(self) -> Trajectory:
        table, data_rel = self._rows()
        time = self._time(table)
        ts = np.round(time * 1e9).astype(np.int64)
        n = table.num_rows
        common: dict[str, AttrValue] = {"source_file": data_rel, "nominal_rate_hz": self.fps}
        streams: list[Stream] = []
        used = set(DEFAULT_COLUMNS)
        state = self.features.get(CERES_STATE)
        if state is not None and state.names == STATE_NAMES:
            values = column_values(table, state).astype(np.float64)
            streams += _ceres_state(values, ts, common)
            used.add(CERES_STATE)
            action = self.features.get(CERES_ACTION)
            if action is not None and action.names == ACTION_NAMES:
                streams.append(_pinch(column_values(table, action), values, ts, common))
                used.add(CERES_ACTION)
        if all(c in table.column_names for c in CERES_SOURCE):
            slots = {
                "slot_index": table.column(CERES_SOURCE[0]).to_numpy().astype(np.int64),
                "gap": table.column(CERES_SOURCE[2]).to_numpy(zero_copy_only=False).astype(bool),
                "source_time": table.column(CERES_SOURCE[1]).to_numpy().astype(np.float64),
            }
            slot_attrs = {**common, "rate_hz": self.fps}
            streams.append(
                make_stream("recorder_slots", "recorder_slots", ts, 0, slots, slot_attrs)
            )
            used |= set(CERES_SOURCE)
        for key, feature in self.features.items():
            if key in used or feature.dtype in (*_NOT_COLUMNS, "string"):
                continue
            values = column_values(table, feature).astype(np.float64)
            names = feature.names or tuple(f"{key}.{i}" for i in range(feature.width))
            attrs = {**common, "names": json.dumps(list(names)), "source_field": key}
            streams.append(make_stream(key, "vector", ts, 0, {"values": values}, attrs))
        media = []
        for key, feature in self.features.items():
            if feature.dtype == "video":
                ref, frames = self._video(key, feature, n, ts, common)
                media.append(ref)
                streams.append(frames)
        log.info("lerobot_v3 %s: %d rows, %d streams", self.files.capture, n, len(streams))
        return Trajectory(
            info=self._capture_info(),
            streams=tuple(streams),
            annotations=self._annotations(table),
            media=tuple(media),
            files=tuple(
                FileRef(role, rel, "application/json")
                for role, rel in (("dataset_info", INFO_FILE), ("ceres_metadata", CERES_METADATA))
                if self.files.exists(rel)
            )
            + imported_files(self.files),
        )

    def _video(
        self, key: str, feature: Feature, n: int, ts: np.ndarray, common: Mapping[str, Any]
    ) -> tuple[MediaRef, Stream]:
        ep = self.episode
        rel = self._path(
            "video_path",
            "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4",
            video_key=key,
            chunk_index=int(ep.get(f"videos/{key}/chunk_index", 0)),
            file_index=int(ep.get(f"videos/{key}/file_index", 0)),
        )
        probe = probe_video(self.files, rel)
        first = round(float(ep.get(f"videos/{key}/from_timestamp", 0.0)) * self.fps)
        if first + n > probe.frame_count:
            raise self.files.error(
                rel,
                f"holds {probe.frame_count} frames; the episode needs "
                f"frames {first}..{first + n - 1}",
                field=key,
            )
        camera = self.metadata.get("camera", {})
        role = str(camera.get("selected") or key)
        name = f"{role}_frames"
        frames = make_stream(
            name,
            "media_frames",
            ts,
            0,
            {"frame_index": np.arange(first, first + n, dtype=np.int64)},
            {**common, "media": role, "video_key": key},
        )
        return probe.media_ref(role, rel, "video/mp4", frames_stream=name), frames

    # ------------------------------------------------------------------ header

    def _capture_info(self) -> CaptureInfo:
        meta = self.metadata
        episode = meta.get("episode", {}) if isinstance(meta.get("episode"), dict) else {}
        capture = meta.get("capture", {}) if isinstance(meta.get("capture"), dict) else {}
        source = episode.get("source_kind")
        characteristics = tuple(
            Characteristic(str(k), str(v.get("status")), v.get("value"))
            for k, v in sorted(capture.get("characteristics", {}).items())
            if isinstance(v, dict) and v.get("status") in ("known", "unknown", "unavailable")
        )
        rate = capture.get("recorder_rate_hz", {})
        handedness = capture.get("handedness", "right")
        up_axis = capture.get("up_axis", "Y")
        return CaptureInfo(
            capture_id=self.files.capture,
            source_kind=SOURCE_KIND,
            source_version=f"LeRobotDataset {self.info['codebase_version']}"
            + (f" from {source}" if source else ""),
            start_ns=0,
            clock="device",
            source_capture_id=str(episode.get("id", "")),
            embodiment=str(self.info.get("robot_type") or "unknown"),
            world_frame=str(capture.get("world_frame", "world")),
            handedness=handedness if handedness in ("right", "left") else "right",
            up_axis=up_axis if up_axis in ("X", "Y", "Z", "-X", "-Y", "-Z") else "Y",
            recorder_rate_hz=float(rate["value"])
            if isinstance(rate, dict) and isinstance(rate.get("value"), int | float)
            else None,
            cameras=self._cameras(),
            characteristics=characteristics,
            study=self._study(),
        )

    def _study(self) -> StudyInfo | None:
        study = self.metadata.get("study")
        if not isinstance(study, dict):
            return None
        keys = (
            "headset_id",
            "demonstrator_id",
            "project_id",
            "consent_date",
            "consent_document_id",
            "raw_audio_retained",
        )
        return StudyInfo(**{k: study.get(k) for k in keys})

    def _cameras(self) -> tuple[CameraCalibration, ...]:
        cal = self.metadata.get("calibration")
        if not isinstance(cal, dict) or not isinstance(cal.get("intrinsics"), dict):
            return ()
        i = cal["intrinsics"]
        try:
            return (
                CameraCalibration(
                    camera=str(cal.get("camera", "")),
                    model=str(cal.get("model", "pinhole")),
                    width=int(i["width"]),
                    height=int(i["height"]),
                    fx=float(i["fx"]),
                    fy=float(i["fy"]),
                    cx=float(i["cx"]),
                    cy=float(i["cy"]),
                    distortion=tuple(float(d) for d in cal.get("distortion", ())),
                    rms_error_px=cal.get("rms_error_px"),
                    sample_count=cal.get("sample_count"),
                    captured_at=cal.get("captured_at"),
                ),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise self.files.error(
                CERES_METADATA, f"calibration: {exc}", field="calibration"
            ) from None

    def _annotations(self, table: pa.Table) -> Annotations:
        tasks = self._parquet(TASKS_FILE) if self.files.exists(TASKS_FILE) else None
        texts: dict[int, str] = {}
        if tasks is not None and "task_index" in tasks.column_names:
            names = tasks.column(
                "task" if "task" in tasks.column_names else tasks.column_names[-1]
            ).to_pylist()
            texts = dict(zip(tasks.column("task_index").to_pylist(), names, strict=True))
        indices = np.unique(table.column("task_index").to_numpy()).tolist()
        instructions = tuple(str(texts[i]) for i in indices if i in texts)
        segments = []
        slots = (
            table.column(CERES_SOURCE[0]).to_numpy()
            if CERES_SOURCE[0] in table.column_names
            else None
        )
        for i, seg in enumerate(self.metadata.get("segments", []) or []):
            try:
                start = round(float(seg["source_start_s"]) * 1e9)
                end = round(float(seg["source_end_s"]) * 1e9)
                start_slot, end_slot = _slot_range(
                    slots, seg.get("frame_start"), seg.get("frame_end")
                )
                segments.append(
                    Segment(
                        segment_id=str(seg.get("segment_id", f"seg-{i:03d}")),
                        task=str(seg.get("task", "")),
                        cycle=int(seg.get("cycle", 0)),
                        repetition=int(seg.get("repetition", 0)),
                        take=int(seg.get("take", 0)),
                        outcome=str(seg.get("outcome", "unknown")),
                        start_ns=start,
                        end_ns=max(start, end),
                        start_slot=start_slot,
                        end_slot=end_slot,
                        annotations={
                            str(k): str(v) for k, v in (seg.get("annotations") or {}).items()
                        },
                    )
                )
            except (KeyError, TypeError, ValueError) as exc:
                raise self.files.error(
                    CERES_METADATA, f"segment {i}: {exc}", field="segments", row=i + 1
                ) from None
        return Annotations(instructions=instructions, segments=tuple(segments))


def _ceres_state(values: np.ndarray, ts: np.ndarray, common: Mapping[str, Any]) -> list[Stream]:
    """``head``, ``hand_left``, ``hand_right`` from (N, 410) CERES states."""
    n = len(values)
    head_valid = values[:, 0] > 0
    streams = [
        make_stream(
            "head",
            "pose",
            ts,
            0,
            {
                "position": values[:, 1:4],
                "rotation": values[:, 4:8],
                "valid": head_valid,
            },
            {**common, "frame": "world"},
        )
    ]
    joints = len(JOINT_SETS["webxr25"])
    for side in SIDES:
        start = hand_offset(side)
        tracked = values[:, start] > 0
        block = values[:, start + 1 : start + HAND_WIDTH].reshape(n, joints, 8)
        joint_valid = tracked[:, None] & (block != 0).any(axis=2)
        streams.append(
            make_stream(
                f"hand_{side}",
                "hand_joints",
                ts,
                0,
                {
                    "position": np.ascontiguousarray(block[:, :, 0:3]),
                    "rotation": np.ascontiguousarray(block[:, :, 3:7]),
                    "radius": np.ascontiguousarray(block[:, :, 7]),
                    "joint_valid": joint_valid,
                    "hand_valid": tracked,
                },
                {**common, "joint_set": "webxr25", "hand": side, "frame": "world"},
            )
        )
    return streams


def _pinch(
    action: np.ndarray, state: np.ndarray, ts: np.ndarray, common: Mapping[str, Any]
) -> Stream:
    """``pinch`` from the CERES action: metres, NaN where the hand is untracked."""
    fields = {}
    for i, side in enumerate(SIDES):
        tracked = state[:, hand_offset(side)] > 0
        fields[side] = np.where(tracked, action[:, i].astype(np.float64), np.nan)
    return make_stream("pinch", "pinch", ts, 0, fields, dict(common))


def _slot_range(
    slots: np.ndarray | None, frame_start: Any, frame_end: Any
) -> tuple[int | None, int | None]:
    """The recorder-slot range [start, end) of a segment's exported rows [frame_start,
    frame_end) (``ceres.source_frame_index`` of its first and last row): the recorder
    stream's slots, so that a re-export cuts the same rows; (None, None) without them."""
    if slots is None or frame_start is None or frame_end is None:
        return None, None
    first, end = int(frame_start), int(frame_end)
    if not 0 <= first < end <= len(slots):
        return None, None
    return int(slots[first]), int(slots[end - 1]) + 1
