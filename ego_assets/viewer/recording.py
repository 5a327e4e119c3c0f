"""Build a Rerun recording (``.rrd``) of one episode from its canonical `Trajectory`.

Timelines: ``time`` (seconds since capture start, shared by every stream, each stream
logged on its own sample times, nothing resampled) and, for each camera,
``frame_<role>`` (the frame index in its video file).

Entities (``<s>`` is a stream name, ``<role>`` a media role):

* ``world``: view coordinates from the capture's handedness and up axis; metres.
* ``world/device``: the device/head pose (the first ``pose`` stream without a ``hand``
  attr) as a transform; ``world/device/<camera>``: a pinhole frustum from the camera
  calibration (``camera_from_device``); streams in the ``device`` frame hang below it.
* ``world/wrist_<hand>``: a hand's anchor/wrist pose stream; streams in the ``wrist``
  frame of that hand hang below it.
* ``<parent>/<s>``: hand skeletons (``hand_joints``; MANO ``joints``) as line strips
  with the bones of their joint set, blue for left, red for right, nothing drawn while
  untracked; MANO without joints, Aria wrist/palm: points. ``world/objects/<anchor>``:
  object anchors (transform + labelled box, box only while tracked).
* ``world/cameras/<role>`` (``cameras/<role>`` when the frames carry no camera pose):
  the video file as a video asset with one frame reference per frame at the frame's
  own time, the per-frame camera pose and pinhole; ``.../landmarks/<s>``: 2D hand
  landmarks over the image.
* ``signals/...``: time series: hand tracked (0/1), confidences, wrist speed (m/s),
  pinch distances (m), IMU, stream gaps (1 inside a gap) and retried segments.
* ``events/...``: text logs of gaps, timestamp faults, segments, procedure steps,
  transcript and VLM outputs; ``annotations/...``: the current procedure step and
  segment as text documents, the instructions.
* ``quality/report``: the quality verdict, export gate and blocking reasons (markdown).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import rerun as rr
import rerun.blueprint as rrb

from ego_assets.quality.gate import Gate
from ego_assets.quality.hands import wrist_steps
from ego_assets.quality.report import QualityReport, compute_report
from ego_assets.quality.streams import validity
from ego_assets.trajectory.joints import PARENTS
from ego_assets.trajectory.model import CameraCalibration, MediaRef, Trajectory
from ego_assets.trajectory.streams import SampleFlag, Stream
from ego_assets.viewer.skeleton import skeleton_strips
from ego_assets.viewer.video import load_video

APPLICATION_ID = "ego_assets"
RECORDING_FILE = "episode.rrd"
# Bumped when the recording of an unchanged trajectory changes (part of the quality
# step's code version: the recording is written beside the quality report).
VIEWER_VERSION = "viewer-1"
TIME = "time"
HAND_RGB = {"left": (40, 110, 255), "right": (235, 60, 40)}
OTHER_RGB = (200, 200, 200)
STRIP_RADIUS_M = 0.002
POINT_RADIUS_M = 0.006
OBJECT_HALF_SIZE_M = 0.05
# Camera axes of ``world_to_camera`` / ``camera_from_device`` by the frames stream's
# ``camera_axes`` attr: OpenCV (x right, y down, z forward), ARKit (x right, y up, -z).
CAMERA_AXES: dict[str, rr.components.ViewCoordinates] = {
    "opencv": rr.components.ViewCoordinates.RDF,
    "arkit": rr.components.ViewCoordinates.RUB,
}
DEFAULT_AXES = "opencv"


class ArrowBatch:
    """A prebuilt Arrow array as a Rerun component batch."""

    def __init__(self, array: pa.Array) -> None:
        self.array = array

    def as_arrow_array(self) -> pa.Array:
        return self.array


def mat3x3_column(descriptor: rr.ComponentDescriptor, mats: np.ndarray) -> rr.ComponentColumn:
    """One 3x3 matrix per row (Rerun stores them column-major, float32), vectorized."""
    flat = np.ascontiguousarray(np.asarray(mats, np.float32).transpose(0, 2, 1)).ravel()
    item = pa.field("item", pa.float32(), nullable=False)
    values = pa.FixedSizeListArray.from_arrays(pa.array(flat), type=pa.list_(item, 9))
    return rr.ComponentColumn(descriptor, ArrowBatch(values))


@dataclass
class RecordingSummary:
    """What went into a recording: entity -> rows logged (static rows not counted).

    Attributes:
        path: the ``.rrd`` file.
        rows: entity path -> number of temporal rows.
        videos: media role -> entity path of its video.
        notes: things the recording could not show, in words.
    """

    path: Path
    rows: dict[str, int] = field(default_factory=dict)
    videos: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def to_duration(seconds: np.ndarray) -> np.ndarray:
    """Seconds since capture start as ``timedelta64[ns]``, rounded to the nanosecond
    (``time`` is ``(timestamp_ns - start_ns) / 1e9``, so this gives the source's ns back)."""
    return np.round(np.asarray(seconds, np.float64) * 1e9).astype("timedelta64[ns]")


def entity(parent: str, *names: str) -> str:
    """``/<parent>/<name>...``: ``parent`` is a path, ``names`` are escaped (stream names
    may hold dots or spaces)."""
    tail = "".join(f"/{rr.escape_entity_path_part(n)}" for n in names)
    return "/" + parent.strip("/") + tail


def view_coordinates(handedness: str, up_axis: str) -> rr.ViewCoordinates:
    """Rerun view coordinates for a world frame (``"right"``, ``"Y"`` -> RIGHT_HAND_Y_UP)."""
    direction = "DOWN" if up_axis.startswith("-") else "UP"
    return getattr(rr.ViewCoordinates, f"{handedness.upper()}_HAND_{up_axis[-1]}_{direction}")


class _Builder:
    def __init__(
        self,
        rec: rr.RecordingStream,
        trajectory: Trajectory,
        report: QualityReport,
        summary: RecordingSummary,
        media_dir: Path | None,
    ) -> None:
        self.rec = rec
        self.media_dir = media_dir
        self.t = trajectory
        self.report = report
        self.summary = summary
        self.start_ns = trajectory.info.start_ns
        self.device = next(
            (s for s in trajectory.streams_of_kind("pose") if "hand" not in s.attrs), None
        )
        self.wrists = {
            str(s.attrs["hand"]): s for s in trajectory.streams_of_kind("pose") if "hand" in s.attrs
        }

    # -- logging helpers ---------------------------------------------------------------

    def static(self, path: str, archetype: rr.AsComponents) -> None:
        self.rec.log(path, archetype, static=True, strict=True)

    def send(
        self,
        path: str,
        times: np.ndarray,
        columns: Iterable[rr.ComponentColumn],
        extra: Sequence[rr.TimeColumn] = (),
        *,
        count: bool = True,
    ) -> None:
        """Send columns on the ``time`` timeline (+ ``extra``); ``count``: add to the rows."""
        cols = list(columns)
        self.rec.send_columns(
            path,
            indexes=[rr.TimeColumn(TIME, duration=to_duration(times)), *extra],
            columns=cols,
            strict=True,
        )
        if count:
            key = entity(path)
            self.summary.rows[key] = self.summary.rows.get(key, 0) + len(times)

    def scalars(self, path: str, times: np.ndarray, values: np.ndarray, name: str) -> None:
        values = np.asarray(values, np.float64)
        names = [name] if values.ndim == 1 else [f"{name} {a}" for a in "xyz"[: values.shape[1]]]
        self.static(path, rr.SeriesLines(names=names))
        self.send(path, times, rr.Scalars.columns(scalars=values))

    def text_log(
        self, path: str, times: Sequence[float], texts: Sequence[str], levels: Sequence[str]
    ) -> None:
        if len(times):
            order = np.argsort(np.asarray(times, np.float64), kind="stable")
            self.send(
                path,
                np.asarray(times, np.float64)[order],
                rr.TextLog.columns(
                    text=[texts[i] for i in order], level=[levels[i] for i in order]
                ),
            )

    def ranges(self, path: str, spans: Sequence[tuple[float, float]], name: str) -> None:
        """A 0/1 step series: 1 from each span's start to its end."""
        if not spans:
            return
        starts = np.array([s for s, _ in spans], np.float64)
        ends = np.array([e for _, e in spans], np.float64)
        times = np.stack([starts, ends], axis=1).ravel()
        values = np.tile([1.0, 0.0], len(spans))
        order = np.argsort(times, kind="stable")
        self.scalars(path, times[order], values[order], name)

    def parent(self, stream: Stream) -> str | None:
        """Entity under which a stream in frame ``attrs['frame']`` is placed."""
        frame = stream.attrs.get("frame", "world")
        if frame == "world":
            return "world"
        if frame == "device":
            return "world/device"
        if frame == "wrist" and str(stream.attrs.get("hand")) in self.wrists:
            return f"world/wrist_{stream.attrs['hand']}"
        self.summary.notes.append(
            f"stream {stream.name!r}: frame {frame!r} has no pose in the trajectory; "
            "shown in its own space"
        )
        return None

    # -- the parts of the recording ----------------------------------------------------

    def header(self) -> None:
        info = self.t.info
        self.static("world", view_coordinates(info.handedness, info.up_axis))
        notes = self.t.annotations
        if notes.instructions:
            text = "\n".join(f"- {i}" for i in notes.instructions)
            self.static(
                "annotations/instructions",
                rr.TextDocument(
                    f"## Instructions ({notes.language})\n\n{text}", media_type="text/markdown"
                ),
            )

    def poses(self) -> None:
        for stream in self.t.streams_of_kind("pose"):
            if stream is self.device:
                path = "world/device"
            elif "hand" in stream.attrs:
                path = f"world/wrist_{stream.attrs['hand']}"
            else:
                path = entity("world", stream.name)
            ok = validity(stream) & np.isfinite(stream.fields["position"]).all(axis=1)
            ok &= np.isfinite(stream.fields["rotation"]).all(axis=1)
            self.static(path, rr.TransformAxes3D(0.05))
            self.send(
                path,
                stream.time[ok],
                rr.Transform3D.columns(
                    translation=stream.fields["position"][ok],
                    quaternion=stream.fields["rotation"][ok],
                ),
            )

    def calibration_frustums(self) -> None:
        if self.device is None:
            return
        for cal in self.t.info.cameras:
            media = _media_for(self.t, cal)
            path = f"world/device/{cal.camera}"
            axes = CAMERA_AXES[DEFAULT_AXES]
            if media is not None and media.frames_stream:
                axes = CAMERA_AXES[
                    str(self.t.stream(media.frames_stream).attrs.get("camera_axes", DEFAULT_AXES))
                ]
            if cal.camera_from_device is not None:
                device_from_camera = np.linalg.inv(np.asarray(cal.camera_from_device).reshape(4, 4))
                self.static(
                    path,
                    rr.Transform3D(
                        translation=device_from_camera[:3, 3], mat3x3=device_from_camera[:3, :3]
                    ),
                )
            self.static(path, _pinhole(cal.fx, cal.fy, cal.cx, cal.cy, cal.width, cal.height, axes))

    def hands(self) -> None:
        for stream in self.t.streams:
            if stream.kind == "hand_joints":
                self.skeleton(stream, stream.fields["position"], str(stream.attrs["joint_set"]))
            elif stream.kind == "mano" and "joints" in stream.fields:
                self.skeleton(stream, stream.fields["joints"], "mano21")
            elif stream.kind == "mano":
                self.points(stream, stream.fields["transl"][:, None, :])
            elif stream.kind == "wrist_palm":
                parts = [stream.fields["wrist_position"]]
                if "palm_position" in stream.fields:
                    parts.append(stream.fields["palm_position"])
                self.points(stream, np.stack(parts, axis=1))
            else:
                continue
            self.hand_signals(stream)

    def _placed(self, stream: Stream) -> str:
        parent = self.parent(stream)
        return entity(parent, stream.name) if parent else entity("frames", stream.name)

    def skeleton(self, stream: Stream, positions: np.ndarray, joint_set: str) -> None:
        path = self._placed(stream)
        tracked = validity(stream)[:, None] & np.isfinite(positions).all(axis=2)
        if "joint_valid" in stream.fields:
            tracked &= stream.fields["joint_valid"]
        colour = HAND_RGB.get(str(stream.attrs.get("hand")), OTHER_RGB)
        if joint_set not in PARENTS:
            self.points(stream, positions, tracked)
            return
        strips = skeleton_strips(positions, tracked, joint_set)
        self.static(path, rr.LineStrips3D.from_fields(colors=[colour], radii=[STRIP_RADIUS_M]))
        column = rr.ComponentColumn(
            rr.LineStrips3D.descriptor_strips(), ArrowBatch(strips.strips), offsets=strips.offsets
        )
        self.send(path, stream.time, [column])

    def points(self, stream: Stream, points: np.ndarray, tracked: np.ndarray | None = None) -> None:
        """(T, K, 3) points per sample, the untracked ones left out."""
        path = self._placed(stream)
        ok = np.isfinite(points).all(axis=2) & validity(stream)[:, None]
        if tracked is not None:
            ok &= tracked
        colour = HAND_RGB.get(str(stream.attrs.get("hand")), OTHER_RGB)
        self.static(path, rr.Points3D.from_fields(colors=[colour], radii=[POINT_RADIUS_M]))
        flat = points.reshape(-1, 3)[ok.ravel()].astype(np.float32)
        self.send(
            path,
            stream.time,
            rr.Points3D.columns(positions=flat).partition(ok.sum(axis=1)),
        )

    def hand_signals(self, stream: Stream) -> None:
        base = entity("signals", stream.name)
        self.scalars(f"{base}/tracked", stream.time, validity(stream).astype(np.float64), "tracked")
        if "hand_confidence" in stream.fields:
            self.scalars(
                f"{base}/hand_confidence",
                stream.time,
                stream.fields["hand_confidence"],
                "hand confidence",
            )
        if "joint_confidence" in stream.fields:
            conf = stream.fields["joint_confidence"]
            mean = np.full(len(stream), np.nan)
            has = np.isfinite(conf).any(axis=1)
            mean[has] = np.nanmean(conf[has], axis=1)
            self.scalars(f"{base}/joint_confidence", stream.time, mean, "mean joint confidence")
        steps = wrist_steps(stream)
        if steps is not None and steps[0].any() and stream.attrs.get("frame") != "wrist":
            pair, step_m, dt_s = steps
            self.scalars(
                f"{base}/wrist_speed", stream.time[1:][pair], step_m / dt_s, "wrist speed m/s"
            )

    def landmarks_2d(self, image: dict[str, tuple[str, MediaRef]]) -> None:
        streams = self.t.streams_of_kind("hand_landmarks_2d")
        if not streams:
            return
        if not image:
            self.summary.notes.append("2D landmarks without a video: not shown over an image")
            return
        cam_path, media = next(iter(image.values()))
        for stream in streams:
            path = entity(cam_path, "landmarks", stream.name)
            uv = stream.fields["uv"].copy()
            if str(stream.attrs.get("image_origin")) in ("lower-left", "bottom-left"):
                uv[..., 1] = 1.0 - uv[..., 1]
            pixels = uv * np.array([media.width, media.height], np.float64)
            ok = (
                validity(stream)[:, None]
                & (stream.fields["joint_confidence"] > 0)
                & np.isfinite(pixels).all(axis=2)
            )
            colour = HAND_RGB.get(str(stream.attrs.get("hand")), OTHER_RGB)
            self.static(path, rr.Points2D.from_fields(colors=[colour], radii=[2.0]))
            self.send(
                path,
                stream.time,
                rr.Points2D.columns(positions=pixels[ok].astype(np.float32)).partition(
                    ok.sum(axis=1)
                ),
            )

    def objects(self) -> None:
        for stream in self.t.streams_of_kind("object_pose"):
            ids = stream.fields["anchor_id"].astype(str)
            for anchor in sorted(set(ids)):
                rows = ids == anchor
                name = str(stream.fields["anchor_name"][rows][0])
                path = entity("world/objects", anchor)
                self.static(
                    path,
                    rr.Boxes3D.from_fields(
                        half_sizes=[[OBJECT_HALF_SIZE_M] * 3], labels=[name], show_labels=True
                    ),
                )
                valid = stream.fields["valid"][rows]
                self.send(
                    path,
                    stream.time[rows],
                    [
                        *rr.Transform3D.columns(
                            translation=stream.fields["position"][rows],
                            quaternion=stream.fields["rotation"][rows],
                        ),
                        *rr.Boxes3D.columns(centers=np.zeros((int(valid.sum()), 3))).partition(
                            valid.astype(np.int64)
                        ),
                    ],
                )

    def videos(self) -> dict[str, tuple[str, MediaRef]]:
        """Log every video; returns role -> (entity path, media) of those logged."""
        shown: dict[str, tuple[str, MediaRef]] = {}
        for media in self.t.media:
            if media.kind != "video" or media.frames_stream is None:
                continue
            frames = self.t.stream(media.frames_stream)
            path = self.video(media, frames)
            if path is not None:
                shown[media.role] = (path, media)
        return shown

    def video(self, media: MediaRef, frames: Stream) -> str | None:
        if self.media_dir is None:
            self.summary.notes.append(f"video {media.role!r}: raw media folder not given")
            return None
        file = self.media_dir / media.path
        if not file.is_file():
            self.summary.notes.append(f"video {media.role!r}: {media.path} not found")
            return None
        asset = load_video(file, media.mime)
        pts_ns = frame_pts(asset.pts_ns, frames, f"capture {self.t.info.capture_id!r}", media.path)
        posed = (
            "world_to_camera" in frames.fields
            and np.isfinite(frames.fields["world_to_camera"]).all(axis=(1, 2)).any()
        )
        path = entity("world/cameras", media.role) if posed else entity("cameras", media.role)
        self.static(path, rr.AssetVideo(contents=asset.data, media_type="video/mp4"))
        self.send(
            path,
            frames.time,
            rr.VideoFrameReference.columns_nanos(pts_ns),
            extra=[rr.TimeColumn(f"frame_{media.role}", sequence=frames.fields["frame_index"])],
        )
        axes = CAMERA_AXES[str(frames.attrs.get("camera_axes", DEFAULT_AXES))]
        if posed:
            w2c = frames.fields["world_to_camera"]
            ok = np.isfinite(w2c).all(axis=(1, 2))
            c2w = np.linalg.inv(w2c[ok])
            self.send(
                path,
                frames.time[ok],
                [
                    *rr.Transform3D.columns(translation=c2w[:, :3, 3]),
                    mat3x3_column(rr.Transform3D.descriptor_mat3x3(), c2w[:, :3, :3]),
                ],
                count=False,
            )
        if "intrinsics" in frames.fields:
            k = frames.fields["intrinsics"]
            ok = np.isfinite(k).all(axis=1)
            mats = np.zeros((int(ok.sum()), 3, 3))
            mats[:, 0, 0], mats[:, 1, 1] = k[ok, 0], k[ok, 1]
            mats[:, 0, 2], mats[:, 1, 2], mats[:, 2, 2] = k[ok, 2], k[ok, 3], 1.0
            # every Pinhole component on the same rows: a static part beside temporal
            # intrinsics leaves the camera without a transform in the viewer (0.41)
            n = len(mats)
            item = pa.field("item", pa.float32(), nullable=False)
            resolution = np.tile(np.array([media.width, media.height], np.float32), n)
            xyz = np.tile(np.asarray(axes.as_arrow_array()[0].as_py(), np.uint8), n)
            u8 = pa.field("item", pa.uint8(), nullable=False)
            columns = [
                mat3x3_column(rr.Pinhole.descriptor_image_from_camera(), mats),
                rr.ComponentColumn(
                    rr.Pinhole.descriptor_resolution(),
                    ArrowBatch(
                        pa.FixedSizeListArray.from_arrays(resolution, type=pa.list_(item, 2))
                    ),
                ),
                rr.ComponentColumn(
                    rr.Pinhole.descriptor_camera_xyz(),
                    ArrowBatch(pa.FixedSizeListArray.from_arrays(xyz, type=pa.list_(u8, 3))),
                ),
            ]
            self.send(path, frames.time[ok], columns, count=False)
        else:
            cal = _calibration_for(self.t, media)
            if cal is not None:
                self.static(
                    path, _pinhole(cal.fx, cal.fy, cal.cx, cal.cy, cal.width, cal.height, axes)
                )
        self.summary.videos[media.role] = path
        return path

    def other_signals(self) -> None:
        for stream in self.t.streams_of_kind("pinch"):
            for hand in ("left", "right"):
                self.scalars(
                    entity("signals", stream.name, hand),
                    stream.time,
                    stream.fields[hand],
                    f"pinch {hand} m",
                )
        for stream in self.t.streams_of_kind("imu"):
            for name in ("accel", "gyro", "gravity"):
                if name in stream.fields:
                    self.scalars(
                        entity("signals", stream.name, name), stream.time, stream.fields[name], name
                    )
        for stream in self.t.streams_of_kind("recorder_slots"):
            gap = stream.fields["gap"]
            self.scalars(
                entity("signals", stream.name, "gap"),
                stream.time,
                gap.astype(np.float64),
                "gap slot",
            )

    def gaps_and_faults(self) -> None:
        times: list[float] = []
        texts: list[str] = []
        for sq in self.report.streams:
            spans = [(g.start_s, g.start_s + g.length_s) for g in sq.gaps]
            self.ranges(entity("signals/gaps", sq.name), spans, f"{sq.name} gap")
            for g in sq.gaps:
                times.append(g.start_s)
                end = g.start_s + g.length_s
                texts.append(f"{sq.name}: gap of {g.length_s:.3f} s, {g.start_s:.3f}-{end:.3f} s")
        self.text_log("events/gaps", times, texts, ["WARN"] * len(texts))
        times, texts = [], []
        for stream in self.t.streams:
            for flag, label in (
                (SampleFlag.DUPLICATE_TIMESTAMP, "duplicate timestamp"),
                (SampleFlag.BACKWARDS_TIMESTAMP, "timestamp goes backwards"),
            ):
                rows = np.flatnonzero(stream.flags & np.uint8(flag))
                times += stream.time[rows].tolist()
                texts += [f"{stream.name}: {label} at row {r}" for r in rows]
        self.text_log("events/faults", times, texts, ["ERROR"] * len(texts))

    def annotations(self) -> None:
        notes = self.t.annotations
        s0 = self.start_ns
        if notes.segments:
            times, texts, levels = [], [], []
            for seg in notes.segments:
                start, end = (seg.start_ns - s0) / 1e9, (seg.end_ns - s0) / 1e9
                label = (
                    f"segment {seg.segment_id}: {seg.task} cycle {seg.cycle} repetition "
                    f"{seg.repetition} take {seg.take}, {seg.outcome}"
                )
                times += [start, end]
                texts += [f"{label} ({start:.3f}-{end:.3f} s)", f"end of {seg.segment_id}"]
                level = "WARN" if seg.outcome == "retry" else "INFO"
                levels += [level, "DEBUG"]
            self.text_log("events/segments", times, texts, levels)
            retries = [
                ((s.start_ns - s0) / 1e9, (s.end_ns - s0) / 1e9)
                for s in notes.segments
                if s.outcome == "retry"
            ]
            self.ranges("signals/segments/retry", retries, "retried segment")
            self.current(
                "annotations/segment",
                [
                    (
                        (s.start_ns - s0) / 1e9,
                        (s.end_ns - s0) / 1e9,
                        f"{s.segment_id} · {s.task} · take {s.take} · {s.outcome}",
                    )
                    for s in notes.segments
                ],
            )
        if notes.procedure_steps:
            steps = notes.procedure_steps
            self.text_log(
                "events/procedure_steps",
                [s.t_start for s in steps],
                [
                    f"step {s.index} {s.step_id}: {s.title} ({s.t_start:.3f}-{s.t_end:.3f} s)"
                    for s in steps
                ],
                ["INFO"] * len(steps),
            )
            self.current(
                "annotations/procedure_step",
                [(s.t_start, s.t_end, f"{s.step_id}: {s.title}") for s in steps],
            )
        if notes.transcript:
            self.text_log(
                "events/transcript",
                [s.start_s for s in notes.transcript],
                [s.text if s.is_final else f"{s.text} (partial)" for s in notes.transcript],
                ["INFO" if s.is_final else "DEBUG" for s in notes.transcript],
            )
        if notes.vlm:
            self.text_log(
                "events/vlm",
                [v.time for v in notes.vlm],
                [f"{v.prompt} -> {v.output}" for v in notes.vlm],
                ["INFO"] * len(notes.vlm),
            )

    def current(self, path: str, spans: list[tuple[float, float, str]]) -> None:
        """A text document that holds each span's text from its start to its end."""
        rows = sorted(
            [(s, text) for s, _, text in spans] + [(e, "") for _, e, _ in spans],
            key=lambda r: (r[0], r[1] != ""),
        )
        self.send(
            path,
            np.array([r[0] for r in rows], np.float64),
            rr.TextDocument.columns(text=[r[1] or "(none)" for r in rows]),
        )

    def quality(self, gate: Gate | None) -> None:
        self.static(
            "quality/report",
            rr.TextDocument(quality_markdown(self.report, gate), media_type="text/markdown"),
        )


def frame_pts(pts_ns: np.ndarray, frames: Stream, capture: str, file: str) -> np.ndarray:
    """PTS (ns) of the video frame shown by each row of a ``media_frames`` stream.

    A frames table with one row per frame of the file maps row i to the i-th frame
    (frame indices may skip numbers where the source dropped frames: the file lacks
    them too). Otherwise ``frame_index`` is the frame's position in the file.
    """
    if len(frames) == len(pts_ns):
        return pts_ns
    index = frames.fields["frame_index"]
    bad = np.flatnonzero((index < 0) | (index >= len(pts_ns)))
    if bad.size:
        raise ValueError(
            f"{capture}, stream {frames.name!r}, field 'frame_index', row {int(bad[0])}: "
            f"frame {int(index[bad[0]])} is not in {file} ({len(pts_ns)} frames)"
        )
    return pts_ns[index]


def _pinhole(
    fx: float, fy: float, cx: float, cy: float, w: int, h: int, axes: rr.components.ViewCoordinates
) -> rr.Pinhole:
    return rr.Pinhole(
        image_from_camera=np.array([[fx, 0.0, cx], [0.0, fy, cy], [0.0, 0.0, 1.0]]),
        resolution=[w, h],
        camera_xyz=axes,
        image_plane_distance=0.1,
    )


def _media_for(trajectory: Trajectory, cal: CameraCalibration) -> MediaRef | None:
    """The video of a calibrated camera: role equal to the camera or ``camera_<camera>``."""
    for m in trajectory.media:
        if m.kind == "video" and m.role in (cal.camera, f"camera_{cal.camera}"):
            return m
    return None


def _calibration_for(trajectory: Trajectory, media: MediaRef) -> CameraCalibration | None:
    for cal in trajectory.info.cameras:
        if media.role in (cal.camera, f"camera_{cal.camera}"):
            return cal
    return None


def quality_markdown(report: QualityReport, gate: Gate | None) -> str:
    """The quality verdict, export gate, blocking reasons and flagged metrics as markdown."""
    lines = [
        f"# Quality: {report.status.upper()}",
        "",
        f"capture `{report.capture_id}` ({report.source_kind}), report {report.report_version}, "
        f"thresholds v{report.thresholds_version}",
        "",
        f"worst metric: `{report.worst_metric or '-'}`; "
        f"{report.count('fail')} fail, {report.count('warn')} warn, {report.count('pass')} pass",
        "",
    ]
    if gate is None:
        lines += ["## Export gate: not evaluated (no gate stored with this trajectory)", ""]
    else:
        lines += [f"## Export gate: {gate.verdict.upper()}", "", gate.summary(), ""]
        if gate.blocked_exports:
            lines += [f"Blocked exports: {', '.join(gate.blocked_exports)}", ""]
        if gate.reasons:
            lines += ["Blocking reasons:", "", *(f"- {r}" for r in gate.reasons), ""]
        for f in gate.waived:
            lines.append(f"- waived: {f.text()} by {f.waived_by} ({f.waiver_reason})")
        failed = (*gate.errors, *gate.warnings)
        if failed:
            lines += ["", "Expectations not met:", ""]
            lines += [f"- {o.severity} {o.description}: {', '.join(o.observed)}" for o in failed]
            lines.append("")
    flagged = [m for m in report.metrics if m.status != "pass"]
    if flagged:
        lines += [
            "## Metrics out of bounds",
            "",
            "| scope | metric | value | unit | warn | fail | status |",
            "|---|---|---|---|---|---|---|",
        ]
        lines += [
            f"| {m.scope} | {m.name} | {m.value:.4g} | {m.unit} | {m.threshold_warn:g} | "
            f"{m.threshold_fail:g} | {m.status} |"
            for m in flagged
        ]
    return "\n".join(lines) + "\n"


def blueprint(summary_videos: Sequence[str]) -> rrb.Blueprint:
    """Default layout: 3D world and signals on the left; cameras, events, quality right."""
    right: list[rrb.View | rrb.Container] = [
        rrb.Spatial2DView(origin=path, name=path.rsplit("/", 1)[-1]) for path in summary_videos
    ]
    right += [
        rrb.Tabs(
            rrb.TextLogView(origin="events", name="events"),
            rrb.TextDocumentView(origin="quality", name="quality"),
            rrb.TextDocumentView(origin="annotations", name="annotations"),
        )
    ]
    return rrb.Blueprint(
        rrb.Horizontal(
            rrb.Vertical(
                rrb.Spatial3DView(origin="world", name="world"),
                rrb.TimeSeriesView(origin="signals", name="signals"),
                row_shares=[3, 2],
            ),
            rrb.Vertical(*right),
            column_shares=[3, 2],
        ),
        rrb.TimePanel(timeline=TIME),
        collapse_panels=False,
    )


def build_recording(
    trajectory: Trajectory,
    out: Path,
    *,
    media_dir: Path | None = None,
    report: QualityReport | None = None,
    gate: Gate | None = None,
) -> RecordingSummary:
    """Write the Rerun recording of ``trajectory`` to ``out`` (temporary file + rename).

    Args:
        trajectory: the episode.
        out: the ``.rrd`` file to write.
        media_dir: the raw capture folder that the `MediaRef` paths are relative to;
            without it the recording has no video.
        report: its quality report (computed here when not given).
        gate: its export gate, for the blocking reasons (omitted when None).
    """
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    summary = RecordingSummary(out)
    report = report if report is not None else compute_report(trajectory)
    fd, tmp_name = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp")
    os.close(fd)
    tmp = Path(tmp_name)
    rec = rr.RecordingStream(APPLICATION_ID, recording_id=trajectory.info.capture_id)
    try:
        builder = _Builder(
            rec, trajectory, report, summary, Path(media_dir) if media_dir is not None else None
        )
        rec.save(tmp)
        builder.header()
        builder.poses()
        builder.calibration_frustums()
        builder.hands()
        builder.objects()
        shown = builder.videos()
        builder.landmarks_2d(shown)
        builder.other_signals()
        builder.gaps_and_faults()
        builder.annotations()
        builder.quality(gate)
        rec.send_blueprint(blueprint([path for path, _ in shown.values()]))
        rec.flush()
        rec.disconnect()
        os.replace(tmp, out)
    except BaseException:
        rec.disconnect()
        tmp.unlink(missing_ok=True)
        raise
    return summary
