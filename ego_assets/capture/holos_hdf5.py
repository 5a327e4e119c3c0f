"""Reader for ``holos_hdf5`` captures: one demo of a Holos HDF5 file (HolosCapture-1.0).

The capture folder (landed by ``ego-assets import holos-hdf5``) holds:

* ``capture.h5``: a Holos HDF5 file with exactly one ``/data/demo_*`` group (the source
  file byte for byte when it had one demo; otherwise the importer copied that demo, the
  root attributes and label axes into a file of its own);
* ``media/<name><ext>``: the bytes of every ``/media/<name>`` opaque dataset, as
  embedded (``.mov`` for ``video/quicktime``, ``.mp4``, ``.wav``...), so exporters read
  the video like any other capture's.

Streams come from ``/holos/raw`` when the file has it: every stream on its own clock,
with its own ``time`` and ``timestamp_ns``, values exactly as written (float64), named
and typed by the group's ``source_stream`` / ``stream_kind`` attributes (older files:
by the group's place). ARKit skeletons hold 26 joints in the file (``forearmArm`` is
left out by the format): the stream keeps ``arkit27`` with ``forearmArm`` NaN and
untracked, and its attr ``missing_joints`` says so; the sample flags are those of the
values the file holds. Without ``/holos/raw``, the resampled ``obs`` of the demo become
streams on the demo clock (``resampled`` attr; NaN rows of the zero-order hold are
invalid samples); any other numeric ``obs`` key becomes a ``vector`` stream.

The capture header comes from ``/data`` ``env_args`` (``env_kwargs`` is the exporter's
`CaptureInfo`), else from the root and demo attributes; annotations from
``/holos/transcript``, ``/holos/events`` and ``/holos/vlm``.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import h5py
import numpy as np

from ego_assets.capture.files import CaptureFiles
from ego_assets.capture.provenance import PROVENANCE_FILE, provenance_ref, read_provenance
from ego_assets.errors import CaptureFormatError
from ego_assets.trajectory.joints import JOINT_SETS
from ego_assets.trajectory.model import (
    Annotations,
    CaptureInfo,
    FileRef,
    MediaRef,
    ProcedureStep,
    Trajectory,
    TranscriptSegment,
    TranscriptToken,
    VlmOutput,
)
from ego_assets.trajectory.records import from_jsonable
from ego_assets.trajectory.streams import STREAM_KINDS, Stream, sample_flags

log = logging.getLogger(__name__)

H5_FILE = "capture.h5"
MEDIA_DIR = "media"
SOURCE_KIND = "holos-hdf5"
ENV_NAME = "holos_capture"
# MIME tag of an embedded container -> file extension of its extracted copy
MEDIA_EXTENSIONS = {
    "video/quicktime": ".mov",
    "video/mp4": ".mp4",
    "video/x-matroska": ".mkv",
    "audio/wav": ".wav",
    "audio/x-wav": ".wav",
    "application/x-npz": ".npz",
}
ARKIT_FILE_JOINTS = 26  # the format's joint axis: arkit27 without forearmArm
SIDES = ("left", "right")
# typed /holos/raw places -> (stream kind, how the fields are stored)
_TYPED = {
    "device_pose": ("pose", "pose"),
    "hand_pose_world": ("hand_joints", "skeleton"),
    "hand_pose_local": ("hand_joints", "skeleton"),
    "hand_landmarks_3d": ("hand_joints", "landmarks_3d"),
    "hand_landmarks_2d": ("hand_landmarks_2d", "landmarks_2d"),
    "imu": ("imu", "generic"),
}
_CLOCK = ("time", "timestamp_ns")


def metadata_texts(f: h5py.File) -> list[tuple[str, str]]:
    """(dataset path, `FileRef` role) of every verbatim JSON text the file embeds:
    ``/holos/metadata/<name>`` (``session`` is the session metadata) and
    ``/holos/events/procedure_steps_json``. The import writes each to `metadata_file`."""
    out = []
    group = f.get("holos/metadata")
    for name, ds in group.items() if isinstance(group, h5py.Group) else ():
        if isinstance(ds, h5py.Dataset) and ds.shape == () and ds.dtype.kind == "O":
            out.append((ds.name, {"session": "session_metadata"}.get(name, name)))
    if "holos/events/procedure_steps_json" in f:
        out.append(("/holos/events/procedure_steps_json", "procedure_steps"))
    return out


def metadata_file(role: str) -> str:
    """Relative path of the extracted JSON text of `FileRef` role ``role``."""
    return f"metadata/{role}.json"


def media_file(name: str, mime: str) -> str:
    """Relative path of the extracted bytes of ``/media/<name>`` (MIME tag ``mime``)."""
    return f"{MEDIA_DIR}/{name}{MEDIA_EXTENSIONS.get(mime, '.bin')}"


def read_holos_hdf5(files: CaptureFiles, marker: Mapping[str, Any]) -> Trajectory:
    """Read a ``holos_hdf5`` capture folder into the canonical `Trajectory`.

    Raises:
        CaptureFormatError: not an HDF5 file, not exactly one demo, a missing time axis
            or a dataset of the wrong shape (naming the dataset as the field).
    """
    path = files.path(H5_FILE)
    try:
        with h5py.File(path, "r") as f:
            return _Reader(files, f).trajectory()
    except CaptureFormatError:
        raise
    except (OSError, KeyError, ValueError, TypeError) as exc:
        raise files.error(H5_FILE, f"unreadable HDF5: {exc}") from None


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if isinstance(value, np.ndarray) and value.shape == ():
        return _text(value[()])
    return str(value)


def _attr(value: Any) -> str | int | float | bool:
    """An HDF5 attribute as a stream attr value (str, int, float or bool)."""
    if isinstance(value, bytes | np.bytes_):
        return bytes(value).decode("utf-8")
    if isinstance(value, np.bool_ | bool):
        return bool(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    return str(value)


def _group_attrs(group: h5py.Group) -> dict[str, str | int | float | bool]:
    """A raw group's attributes as stream attrs (``boolean_attrs`` names the booleans)."""
    attrs = {k: _attr(v) for k, v in group.attrs.items()}
    flags = str(attrs.pop("boolean_attrs", ""))
    for key in filter(None, (k.strip() for k in flags.split(","))):
        if key in attrs:
            attrs[key] = bool(attrs[key])
    return attrs


class _Reader:
    def __init__(self, files: CaptureFiles, f: h5py.File) -> None:
        self.files = files
        self.f = f
        demos = sorted(k for k in f.get("data", {}) if k.startswith("demo_"))
        if len(demos) != 1:
            raise files.error(
                H5_FILE, f"expected one demo under /data, found {demos}", field="data"
            )
        self.demo_name = demos[0]
        self.demo: h5py.Group = f["data"][demos[0]]
        self.info = self._info()

    def error(self, field: str, message: str) -> CaptureFormatError:
        return self.files.error(H5_FILE, message, field=field)

    # ----------------------------------------------------------------- header

    def _env_kwargs(self) -> dict[str, Any] | None:
        raw = self.f["data"].attrs.get("env_args")
        if raw is None:
            return None
        try:
            env = json.loads(_text(raw))
        except ValueError:
            raise self.error("/data@env_args", "not JSON") from None
        if not isinstance(env, dict) or env.get("env_name") != ENV_NAME:
            return None
        kwargs = env.get("env_kwargs")
        return kwargs if isinstance(kwargs, dict) else None

    def _info(self) -> CaptureInfo:
        kwargs = self._env_kwargs()
        if kwargs is not None and "source_kind" in kwargs:
            try:
                stored = from_jsonable(CaptureInfo, kwargs)
            except (TypeError, ValueError) as exc:
                raise self.error(
                    "/data@env_args", f"env_kwargs is not a capture header: {exc}"
                ) from None
            spec = stored.task_specification
            if spec is not None:  # the file travels as /holos/metadata/task_specification
                rel = metadata_file("task_specification")
                spec = replace(spec, path=rel) if self.files.exists(rel) else None
            return replace(
                stored,
                task_specification=spec,
                capture_id=self.files.capture,
                source_kind=SOURCE_KIND,
                source_version=f"{_text(self.f.attrs.get('Conventions', ''))} from "
                f"{stored.source_kind} ({stored.source_version})",
                source_capture_id=stored.source_capture_id or stored.capture_id,
            )
        attrs = self.f.attrs
        ts = self._demo_timestamps()
        start = _parse_start(_text(attrs.get("capture_start", "")))
        return CaptureInfo(
            capture_id=self.files.capture,
            source_kind=SOURCE_KIND,
            source_version=_text(attrs.get("Conventions", "unknown")),
            start_ns=start if start is not None else int(ts[0]) if len(ts) else 0,
            clock="device" if _text(attrs.get("clock", "epoch")) == "device" else "epoch",
            source_capture_id=_text(attrs.get("capture_id", "")),
            title=_text(attrs.get("title", "")),
            institution=_text(attrs.get("institution", "")),
            organization_id=_text(attrs.get("organization_id", "")),
            modality=_text(attrs.get("modality", "")),
            world_frame=_text(self.demo.attrs.get("frame", "world")),
            handedness=_text(self.demo.attrs.get("handedness", "right")),
            up_axis=_text(self.demo.attrs.get("up_axis", "Y")),
        )

    def _demo_timestamps(self) -> np.ndarray:
        if "timestamp_ns" in self.demo:
            return np.asarray(self.demo["timestamp_ns"][...], np.int64)
        raise self.error(f"/data/{self.demo_name}/timestamp_ns", "the demo has no timestamp_ns")

    # ----------------------------------------------------------------- streams

    def trajectory(self) -> Trajectory:
        raw = self.f.get("holos/raw")
        if isinstance(raw, h5py.Group) and len(raw):
            streams = self._raw_streams(raw)
        else:
            streams = self._obs_streams()
        media = self._media(streams)
        log.info(
            "holos_hdf5 %s: %d streams, %d media", self.files.capture, len(streams), len(media)
        )
        return Trajectory(
            info=self.info,
            streams=tuple(sorted(streams, key=lambda s: s.name)),
            annotations=self._annotations(),
            media=tuple(media),
            files=tuple(self._metadata_files()) + imported_files(self.files),
        )

    def _raw_streams(self, raw: h5py.Group) -> list[Stream]:
        streams: list[Stream] = []
        objects: list[h5py.Group] = []
        for place, node in raw.items():
            if place == "object_pose":
                objects.extend(g for g in node.values() if isinstance(g, h5py.Group))
            elif place in _TYPED and "time" not in node:  # per-side groups
                streams.extend(self._group_stream(g, place) for g in node.values())
            elif place == "video":
                streams.extend(self._group_stream(g, "video") for g in node.values())
            else:
                streams.append(self._group_stream(node, place))
        if objects:
            streams.append(self._objects(objects))
        return streams

    def _group_stream(self, group: h5py.Group, place: str) -> Stream:
        attrs = _group_attrs(group)
        name = str(attrs.pop("source_stream", group.name.rsplit("/", 1)[-1]))
        kind, how = _TYPED.get(place, ("", "generic"))
        kind = str(attrs.pop("stream_kind", kind))
        if place == "video":
            kind = "media_frames"
            attrs.setdefault("media", group.name.rsplit("/", 1)[-1])
        if kind not in STREAM_KINDS:
            raise self.error(group.name, f"unknown stream kind {kind!r}")
        for key in ("_FillValue", "units", "long_name", "source"):
            attrs.pop(key, None)
        if place in ("hand_landmarks_2d",) and "image_origin" not in attrs:
            attrs["image_origin"] = "lower-left"
        ts, time = self._clock(group)
        fields = self._fields(group, kind, how, len(ts))
        return self._stream(name, kind, ts, time, fields, attrs)

    def _clock(self, group: h5py.Group) -> tuple[np.ndarray, np.ndarray]:
        for key in _CLOCK:
            if key not in group:
                raise self.error(f"{group.name}/{key}", "missing")
        ts = np.asarray(group["timestamp_ns"][...], np.int64)
        time = np.asarray(group["time"][...], np.float64)
        if ts.ndim != 1 or time.shape != ts.shape:
            raise self.error(f"{group.name}/time", f"shape {time.shape} != timestamp_ns {ts.shape}")
        return ts, time

    def _read(self, group: h5py.Group, key: str, n: int) -> np.ndarray:
        ds = group[key]
        if ds.shape[:1] != (n,):
            raise self.error(f"{group.name}/{key}", f"has {ds.shape[0]} rows, the time axis {n}")
        return ds[...]

    def _fields(self, group: h5py.Group, kind: str, how: str, n: int) -> dict[str, np.ndarray]:
        fields: dict[str, np.ndarray] = {}
        for key in {"pose": ("pose",), "skeleton": ("joints",)}.get(how, ()):
            pose = np.asarray(self._read(group, key, n), np.float64)
            fields["position"], fields["rotation"] = pose[..., :3], pose[..., 3:7]
        if how in ("landmarks_3d", "landmarks_2d"):
            points = np.asarray(self._read(group, "points", n), np.float64)
            fields["position" if how == "landmarks_3d" else "uv"] = points
            if "confidence" in group:
                fields["joint_confidence"] = np.asarray(self._read(group, "confidence", n), float)
        for spec in STREAM_KINDS[kind].fields:
            if spec.name in fields or spec.name not in group:
                continue
            values = self._read(group, spec.name, n)
            if spec.dtype == "str":
                fields[spec.name] = np.array([_text(v) for v in values], dtype=object)
            else:
                fields[spec.name] = np.ascontiguousarray(values, dtype=spec.dtype)
        return fields

    def _stream(
        self,
        name: str,
        kind: str,
        ts: np.ndarray,
        time: np.ndarray,
        fields: dict[str, np.ndarray],
        attrs: dict[str, Any],
    ) -> Stream:
        flags = sample_flags(ts, fields)
        joints = fields.get("position")
        if (
            kind == "hand_joints"
            and attrs.get("joint_set") == "arkit27"
            and joints is not None
            and joints.shape[1] == ARKIT_FILE_JOINTS
        ):
            fields = _pad_arkit(fields)
            attrs["missing_joints"] = "forearmArm"
        try:
            return Stream(name, kind, ts, time, fields, attrs, flags)
        except ValueError as exc:
            raise self.error(f"/holos/raw ({name})", str(exc)) from None

    def _objects(self, groups: list[h5py.Group]) -> Stream:
        parts = []
        for g in groups:
            ts, time = self._clock(g)
            pose = np.asarray(self._read(g, "pose", len(ts)), np.float64)
            valid = np.asarray(self._read(g, "valid", len(ts)), bool)
            anchor = _text(g.attrs.get("anchor_id", g.name.rsplit("/", 1)[-1]))
            label = _text(g.attrs.get("name", anchor))
            parts.append((ts, time, pose, valid, anchor, label))
        ts = np.concatenate([p[0] for p in parts])
        anchors = np.concatenate([np.full(len(p[0]), p[4], dtype=object) for p in parts])
        order = np.lexsort((anchors.astype(str), ts))
        pose = np.concatenate([p[2] for p in parts])[order]
        fields = {
            "anchor_id": anchors[order],
            "anchor_name": np.concatenate([np.full(len(p[0]), p[5], dtype=object) for p in parts])[
                order
            ],
            "position": pose[:, :3],
            "rotation": pose[:, 3:7],
            "valid": np.concatenate([p[3] for p in parts])[order],
        }
        attrs = _group_attrs(groups[0])
        name = str(attrs.pop("source_stream", "object_pose"))
        for key in ("anchor_id", "name", "stream_kind"):
            attrs.pop(key, None)
        attrs.setdefault("frame", "world")
        time = np.concatenate([p[1] for p in parts])[order]
        return self._stream(name, "object_pose", ts[order], time, fields, attrs)

    def _obs_streams(self) -> list[Stream]:
        """Streams from the demo's resampled ``obs`` (no ``/holos/raw`` in the file)."""
        obs = self.demo.get("obs")
        if not isinstance(obs, h5py.Group):
            raise self.error(f"/data/{self.demo_name}/obs", "the demo has neither obs nor raw")
        ts = self._demo_timestamps()
        n = len(ts)
        time = (ts - np.int64(self.info.start_ns)).astype(np.float64) / 1e9
        resampled = _text(self.demo.attrs.get("resampling", "resampled onto the demo clock"))
        base = {"resampled": resampled, "source_file": H5_FILE}
        joint_set = _text(self.f["joint"].attrs.get("joint_set", "")) if "joint" in self.f else ""
        landmark_set = (
            _text(self.f["landmark"].attrs.get("joint_set", "")) if "landmark" in self.f else ""
        )
        streams: list[Stream] = []
        used = {"timestamp"}
        if "device_pose" in obs:
            pose = np.asarray(self._read(obs, "device_pose", n), np.float64)
            fields = {"position": pose[:, :3], "rotation": pose[:, 3:], "valid": _finite(pose)}
            attrs = {**base, "frame": "world"}
            streams.append(self._stream("device_pose", "pose", ts, time, fields, attrs))
            used.add("device_pose")
        for side in SIDES:
            for frame, suffix in (("world", "world"), ("wrist", "local")):
                key = f"hand_{side}_joints_{suffix}"
                if key in obs and joint_set:
                    pose = np.asarray(self._read(obs, key, n), np.float64)
                    ok = np.asarray(np.isfinite(pose).all(axis=2))
                    fields = {
                        "position": pose[..., :3],
                        "rotation": pose[..., 3:],
                        "joint_valid": ok,
                        "hand_valid": np.asarray(ok.any(axis=1)),
                    }
                    attrs = {**base, "joint_set": joint_set, "hand": side, "frame": frame}
                    streams.append(
                        self._stream(
                            f"hand_{side}_{suffix}", "hand_joints", ts, time, fields, attrs
                        )
                    )
                    used.add(key)
            key = f"hand_{side}_landmarks_3d"
            if key in obs and landmark_set:
                points = np.asarray(self._read(obs, key, n), np.float64)
                fields = {"position": points, "hand_valid": _finite(points)}
                if f"{key[:-3]}_confidence" in obs:
                    conf = np.asarray(self._read(obs, f"hand_{side}_landmarks_confidence", n))
                    fields["joint_confidence"] = conf.astype(np.float64)
                    used.add(f"hand_{side}_landmarks_confidence")
                attrs = {**base, "joint_set": landmark_set, "hand": side, "frame": "world"}
                streams.append(self._stream(key, "hand_joints", ts, time, fields, attrs))
                used.add(key)
        if "imu_accel" in obs and "imu_gyro" in obs:
            fields = {
                "accel": np.asarray(self._read(obs, "imu_accel", n), np.float64),
                "gyro": np.asarray(self._read(obs, "imu_gyro", n), np.float64),
            }
            streams.append(
                self._stream("imu", "imu", ts, time, fields, {**base, "frame": "device"})
            )
            used |= {"imu_accel", "imu_gyro"}
        for key, ds in obs.items():
            if key in used or not isinstance(ds, h5py.Dataset) or ds.dtype.kind not in "fiub":
                continue
            if ds.shape[:1] != (n,) or key.endswith("_frame_index") or key == "object_pose":
                continue
            values = np.asarray(ds[...], np.float64).reshape(n, -1)
            names = json.dumps([f"{key}.{i}" for i in range(values.shape[1])])
            attrs = {**base, "names": names, "source_field": f"obs/{key}"}
            streams.append(self._stream(key, "vector", ts, time, {"values": values}, attrs))
        return streams

    # ----------------------------------------------------------------- media, annotations

    def _metadata_files(self) -> list[FileRef]:
        """The extracted JSON texts (`metadata_texts`) present in the capture folder."""
        return [
            FileRef(role, metadata_file(role), "application/json")
            for _, role in metadata_texts(self.f)
            if self.files.exists(metadata_file(role))
        ]

    def _media(self, streams: list[Stream]) -> list[MediaRef]:
        group = self.f.get("media")
        if not isinstance(group, h5py.Group):
            return []
        frames = {str(s.attrs["media"]): s.name for s in streams if s.kind == "media_frames"}
        out = []
        for name, ds in sorted(group.items()):
            if not isinstance(ds, h5py.Dataset) or ds.dtype.kind != "V":
                continue
            mime = ds.id.get_type().get_tag().decode("ascii")
            rel = media_file(name, mime)
            size = self.files.path(rel).stat().st_size
            if size != ds.shape[0]:
                raise self.files.error(rel, f"{size} bytes, /media/{name} holds {ds.shape[0]}")
            a = ds.attrs
            kind = "audio" if mime.startswith("audio/") else "video"
            if "unit" in a or mime == "application/x-npz":
                kind = "depth"  # a depth map file (metres): `MediaRef.unit`
            out.append(
                MediaRef(
                    role=name,
                    path=rel,
                    mime=mime,
                    kind=kind,
                    codec=_text(a.get("codec", "")),
                    width=int(a.get("width", 0)),
                    height=int(a.get("height", 0)),
                    fps=float(a.get("fps", 0.0)),
                    frame_count=int(a.get("frame_count", 0)),
                    duration_s=float(a.get("duration_s", 0.0)),
                    frames_stream=frames.get(name),
                    sample_rate_hz=int(a.get("sample_rate_hz", 0)),
                    channels=int(a.get("channels", 0)),
                    unit=_text(a.get("unit", "")),
                )
            )
        return out

    def _annotations(self) -> Annotations:
        f = self.f
        transcript: tuple[TranscriptSegment, ...] = ()
        tokens: tuple[TranscriptToken, ...] = ()
        steps: tuple[ProcedureStep, ...] = ()
        vlm: tuple[VlmOutput, ...] = ()
        if "holos/transcript/segments" in f:
            transcript = tuple(
                TranscriptSegment(
                    float(r["start_s"]), float(r["end_s"]), _text(r["text"]), bool(r["is_final"])
                )
                for r in f["holos/transcript/segments"][...]
            )
        if "holos/transcript/tokens" in f:
            tokens = tuple(
                TranscriptToken(
                    int(r["segment"]), float(r["start_s"]), float(r["end_s"]), _text(r["text"])
                )
                for r in f["holos/transcript/tokens"][...]
            )
        if "holos/events/procedure_steps" in f:
            steps = tuple(
                ProcedureStep(
                    int(r["index"]),
                    _text(r["step_id"]),
                    _text(r["title"]),
                    float(r["t_start"]),
                    float(r["t_end"]),
                )
                for r in f["holos/events/procedure_steps"][...]
            )
        if "holos/vlm/output" in f:
            origin = self._mono_start()
            vlm = tuple(
                VlmOutput(
                    float(r["t_mono"]),
                    _text(r["t_wall"]),
                    float(r["t_mono"]) - origin,
                    _text(r["prompt"]),
                    _text(r["output"]),
                )
                for r in f["holos/vlm/output"][...]
            )
        instructions, language = self._session_language()
        return Annotations(
            instructions=instructions,
            language=language,
            procedure_steps=steps,
            transcript=transcript,
            transcript_tokens=tokens,
            vlm=vlm,
        )

    def _session(self) -> dict[str, Any]:
        if "holos/metadata/session" not in self.f:
            return {}
        try:
            doc = json.loads(_text(self.f["holos/metadata/session"][()]))
        except ValueError:
            return {}
        return doc if isinstance(doc, dict) else {}

    def _mono_start(self) -> float:
        """Device monotonic seconds of the capture start (session clock), NaN unknown."""
        clock = self._session().get("clock")
        value = clock.get("capture_start_mono_s") if isinstance(clock, dict) else None
        return float(value) if isinstance(value, int | float) else float("nan")

    def _session_language(self) -> tuple[tuple[str, ...], str]:
        doc = self._session()
        items = doc.get("instructions")
        if isinstance(items, list) and all(isinstance(s, str) for s in items):
            return tuple(items), str(doc.get("language", ""))
        return (), ""


def imported_files(files: CaptureFiles) -> tuple[FileRef, ...]:
    """The provenance `FileRef` of an imported capture (checked), or nothing."""
    if not files.exists(PROVENANCE_FILE):
        return ()
    read_provenance(files)
    return (provenance_ref(),)


def _finite(values: np.ndarray) -> np.ndarray:
    return np.isfinite(values.reshape(len(values), -1)).all(axis=1)


def _pad_arkit(fields: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """ARKit fields of 26 joints -> 27 with ``forearmArm`` NaN (floats) / False (flags)."""
    n = len(JOINT_SETS["arkit27"])
    out = dict(fields)
    for key in ("position", "rotation", "radius", "joint_valid", "joint_confidence"):
        if key not in fields:
            continue
        values = fields[key]
        pad_shape = (values.shape[0], n - values.shape[1], *values.shape[2:])
        fill = np.zeros(pad_shape, bool) if values.dtype == bool else np.full(pad_shape, np.nan)
        out[key] = np.concatenate([values, fill.astype(values.dtype)], axis=1)
    if "joint_valid" not in out:
        valid = np.ones(out["position"].shape[:2], bool)
        valid[:, ARKIT_FILE_JOINTS:] = False
        out["joint_valid"] = valid
    return out


def _parse_start(text: str) -> int | None:
    """Unix ns of an ISO-8601 UTC ``capture_start`` (None when it is not one)."""
    try:
        moment = dt.datetime.fromisoformat(text.split(" ")[0].replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    return round(moment.timestamp() * 1e6) * 1000
