"""Holos HDF5: ``/holos/raw`` (every stream on its own clock) and the annotations
(transcript, events, VLM output).

Part of the writer of `ego_assets.formats.holos_hdf5` (the format: docs/formats/holos-hdf5.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ego_assets.formats.holos_clock import (
    Rows,
    sample_ranges,
)
from ego_assets.formats.holos_demo import Section, time_units
from ego_assets.formats.holos_h5 import H5Writer, write_attrs
from ego_assets.formats.holos_tracks import joint_pick
from ego_assets.formats.holos_writer import (
    NON_UDUNITS,
    SIDES,
    ExportNotes,
    safe_name,
)
from ego_assets.trajectory.model import Trajectory
from ego_assets.trajectory.streams import Stream


class RawSection(Section):
    """Writes ``/holos/raw``: every stream on its own clock, unchanged samples."""

    def __post_init__(self) -> None:
        self.units = time_units(self.trajectory)

    def clock(self, path: str, stream: Stream, rows: np.ndarray | None = None) -> tuple:
        group = self.writer.group(path)
        ts = stream.timestamp_ns if rows is None else stream.timestamp_ns[rows]
        t = stream.time if rows is None else stream.time[rows]
        time = self.writer.time_scale(group, t, self.units)
        self.writer.data(group, "timestamp_ns", ts, [time], "ns", "source timestamp, nanoseconds")
        # every attr, so an import rebuilds the stream; netCDF has no booleans: 0/1 int8,
        # their names listed in ``boolean_attrs``
        flags = sorted(k for k, v in stream.attrs.items() if isinstance(v, bool))
        attrs: list[tuple[str, Any]] = [
            ("source_stream", stream.name),
            ("stream_kind", stream.kind),
        ]
        attrs += [
            (key, np.int8(value) if key in flags else value)
            for key, value in sorted(stream.attrs.items())
        ]
        if flags:
            attrs.append(("boolean_attrs", ", ".join(flags)))
        write_attrs(group, attrs)
        self.notes.raw.append(path)
        return group, time

    def write(self) -> dict[str, str]:
        """Write every stream; returns media role -> frames group path (for decoding)."""
        placed: dict[str, str] = {}
        typed = self._typed_groups()
        for stream in sorted(self.trajectory.streams, key=lambda s: s.name):
            path, how = typed.get(stream.name, (f"holos/raw/{safe_name(stream.name)}", "generic"))
            if how == "pose":
                self._pose(path, stream)
            elif how == "skeleton":
                self._skeleton(path, stream)
            elif how in ("landmarks_3d", "landmarks_2d"):
                self._landmarks(path, stream, how)
            elif how == "imu":
                self._imu(path, stream)
            elif how == "objects":
                self._objects(stream)
            elif how == "video":
                self._generic(path, stream)
                placed[str(stream.attrs["media"])] = path
            else:
                self._generic(path, stream)
        for spec_path in (
            "holos/raw/device_pose",
            "holos/raw/imu",
            "holos/raw/object_pose",
        ):
            if not any(p.startswith(spec_path) for p in self.notes.raw):
                self.notes.skip(spec_path, "the capture has no such stream")
        for kind in (
            "hand_pose_world",
            "hand_pose_local",
            "hand_landmarks_3d",
            "hand_landmarks_2d",
        ):
            for side in SIDES:
                spec_path = f"holos/raw/{kind}/{side}"
                if spec_path not in self.notes.raw:
                    self.notes.skip(spec_path, "the capture has no such stream")
        return placed

    def _typed_groups(self) -> dict[str, tuple[str, str]]:
        """Stream name -> (group path, writer) for streams with a named home in the format."""
        t = self.tracks
        out: dict[str, tuple[str, str]] = {}
        if t.device is not None:
            out[t.device.streams[0].name] = ("holos/raw/device_pose", "pose")
        for kind, tracks, how in (
            ("hand_pose_world", t.skeleton_world, "skeleton"),
            ("hand_pose_local", t.skeleton_local, "skeleton"),
            ("hand_landmarks_3d", t.landmarks, "landmarks_3d"),
            ("hand_landmarks_2d", t.landmarks_2d, "landmarks_2d"),
        ):
            for side, track in tracks.items():
                if len(track.streams) == 1 and track.streams[0].kind != "mano":
                    out[track.streams[0].name] = (f"holos/raw/{kind}/{side}", how)
        if t.imu is not None:
            out[t.imu.name] = ("holos/raw/imu", "imu")
        if t.objects is not None:
            out[t.objects.name] = ("holos/raw/object_pose", "objects")
        for s in self.trajectory.streams:
            if s.kind == "media_frames":
                out[s.name] = (f"holos/raw/video/{safe_name(str(s.attrs['media']))}", "video")
        return out

    def _pose(self, path: str, stream: Stream) -> None:
        group, time = self.clock(path, stream)
        pose = np.concatenate([stream.fields["position"], stream.fields["rotation"]], axis=1)
        pc = self.scales["pose_component"]
        self.writer.data(group, "pose", pose, [time, pc], "m", "pose: position m, quaternion xyzw")
        self.writer.data(group, "valid", stream.fields["valid"], [time], "1", "pose reported valid")
        if "tracking_state" in stream.fields:
            ds = self.writer.strings(
                group, "tracking_state", stream.fields["tracking_state"].tolist(), [time]
            )
            self.writer.attrs(ds, long_name="ARKit tracking state (normal, limited, notAvailable)")

    def _skeleton(self, path: str, stream: Stream) -> None:
        group, time = self.clock(path, stream)
        keep = joint_pick(str(stream.attrs["joint_set"]))
        parts = (stream.fields["position"], stream.fields["rotation"])
        pose = Rows(parts, np.result_type(*parts), pick=keep)
        dims = [time, self.scales["joint"]]
        self.writer.data(
            group,
            "joints",
            pose,
            [*dims, self.scales["pose_component"]],
            "m",
            "joint poses as recorded: position m, quaternion xyzw",
        )
        if "joint_valid" in stream.fields:
            self.writer.data(
                group,
                "joint_valid",
                stream.fields["joint_valid"][:, keep],
                dims,
                "1",
                "joint tracked",
            )
        if "radius" in stream.fields:
            self.writer.data(
                group, "radius", stream.fields["radius"][:, keep], dims, "m", "joint radius"
            )
        if "joint_confidence" in stream.fields:
            self.writer.data(
                group,
                "joint_confidence",
                stream.fields["joint_confidence"][:, keep],
                dims,
                "1",
                "joint confidence",
            )
        self.writer.data(
            group, "hand_valid", stream.fields["hand_valid"], [time], "1", "hand tracked"
        )
        self._hand_confidence(group, time, stream)

    def _hand_confidence(self, group: Any, time: Any, stream: Stream) -> None:
        """The hand stream's per-frame hand confidence (0-1) on ``time``, when it has one."""
        if "hand_confidence" in stream.fields:
            self.writer.data(
                group,
                "hand_confidence",
                stream.fields["hand_confidence"],
                [time],
                "1",
                "hand confidence",
            )

    def _landmarks(self, path: str, stream: Stream, how: str) -> None:
        group, time = self.clock(path, stream)
        landmark = self.scales["landmark"]
        if how == "landmarks_3d":
            points = stream.fields["position"]
            comp, units, what = self.scales["axis_xyz"], "m", "3D landmarks, metres"
        else:
            points = stream.fields["uv"]
            comp, units, what = self.scales["image_uv"], "1", "normalized image u, v"
            self.writer.attrs(group, image_origin=str(stream.attrs["image_origin"]))
        self.writer.data(group, "points", points, [time, landmark, comp], units, what)
        if "joint_confidence" in stream.fields:
            self.writer.data(
                group,
                "confidence",
                stream.fields["joint_confidence"],
                [time, landmark],
                "1",
                "per-landmark confidence, 0 = not seen",
            )
        self._hand_confidence(group, time, stream)
        self.writer.data(
            group, "hand_valid", stream.fields["hand_valid"], [time], "1", "hand detected"
        )

    def _imu(self, path: str, stream: Stream) -> None:
        group, time = self.clock(path, stream)
        source = f"measured ({stream.attrs.get('source_file', stream.name)})"
        self.writer.attrs(group, source=source)
        xyz = [time, self.scales["axis_xyz"]]
        self.writer.data(
            group, "accel", stream.fields["accel"], xyz, "m s-2", "user acceleration, device frame"
        )
        self.writer.data(
            group, "gyro", stream.fields["gyro"], xyz, "rad s-1", "rotation rate, device frame"
        )
        if "gravity" in stream.fields:
            self.writer.data(
                group, "gravity", stream.fields["gravity"], xyz, "m s-2", "gravity, device frame"
            )

    def _objects(self, stream: Stream) -> None:
        anchors = np.asarray(stream.fields["anchor_id"].tolist(), dtype=object)
        names = stream.fields["anchor_name"]
        pose = np.concatenate([stream.fields["position"], stream.fields["rotation"]], axis=1)
        for anchor in sorted(set(anchors.tolist())):
            rows = np.flatnonzero(anchors == anchor)
            group, time = self.clock(f"holos/raw/object_pose/{safe_name(anchor)}", stream, rows)
            self.writer.attrs(group, anchor_id=anchor, name=str(names[rows[0]]))
            pc = self.scales["pose_component"]
            self.writer.data(
                group,
                "pose",
                pose[rows],
                [time, pc],
                "m",
                "anchor pose: position m, quaternion xyzw",
            )
            self.writer.data(
                group, "valid", stream.fields["valid"][rows], [time], "1", "anchor tracked"
            )

    def _generic(self, path: str, stream: Stream) -> None:
        """Any other stream: each field as a dataset, trailing axes on pure dimensions."""
        group, time = self.clock(path, stream)
        for spec in stream.spec.fields:
            if spec.name not in stream.fields:
                continue
            values = stream.fields[spec.name]
            dims = [time]
            for axis, size in enumerate(values.shape[1:], start=1):
                dims.append(self.writer.pure_dim(group, f"{spec.name}_dim{axis}", size))
            if spec.dtype == "str":
                ds = self.writer.strings(group, spec.name, values.tolist(), dims)
                self.writer.attrs(ds, long_name=spec.description)
            elif spec.unit in NON_UDUNITS:
                units, comment = NON_UDUNITS[spec.unit]
                self.writer.data(
                    group, spec.name, values, dims, units, spec.description, comment=comment
                )
            else:
                self.writer.data(group, spec.name, values, dims, spec.unit, spec.description)


# ------------------------------------------------------------------- annotations


def _compound(rows: Sequence[tuple[Any, ...]], fields: list[tuple[str, Any]]) -> np.ndarray:
    import h5py

    dtype = np.dtype(
        [(name, h5py.string_dtype() if kind is str else kind) for name, kind in fields]
    )
    return np.array(rows, dtype=dtype)


def _record_dataset(
    writer: H5Writer, group_path: str, name: str, dim: str, table: np.ndarray
) -> None:
    group = writer.group(group_path)
    ds = group.create_dataset(name, data=table)
    writer.attach(ds, [writer.pure_dim(group, dim, len(table))])


def write_annotations(
    writer: H5Writer, trajectory: Trajectory, time_s: np.ndarray, notes: ExportNotes
) -> None:
    ann = trajectory.annotations
    if ann.transcript:
        rows: list[tuple[Any, ...]] = [
            (s.start_s, s.end_s, s.text, s.is_final) for s in ann.transcript
        ]
        table = _compound(
            rows, [("start_s", "<f8"), ("end_s", "<f8"), ("text", str), ("is_final", "?")]
        )
        _record_dataset(writer, "holos/transcript", "segments", "segment", table)
        tokens = [(t.segment, t.start_s, t.end_s, t.text) for t in ann.transcript_tokens]
        table = _compound(
            tokens, [("segment", "<i8"), ("start_s", "<f8"), ("end_s", "<f8"), ("text", str)]
        )
        _record_dataset(writer, "holos/transcript", "tokens", "token", table)
        writer.text(writer.group("holos/transcript"), "full_text", ann.transcript_text)
    else:
        notes.skip("holos/transcript", "no transcript")
    if ann.procedure_steps:
        steps = ann.procedure_steps
        start, end = sample_ranges(time_s, [s.t_start for s in steps], [s.t_end for s in steps])
        rows = [
            (s.index, s.step_id, s.title, s.t_start, s.t_end, int(a), int(b))
            for s, a, b in zip(steps, start, end, strict=True)
        ]
        fields = [
            ("index", "<i8"),
            ("step_id", str),
            ("title", str),
            ("t_start", "<f8"),
            ("t_end", "<f8"),
            ("start_sample", "<i8"),
            ("end_sample", "<i8"),
        ]
        _record_dataset(writer, "holos/events", "procedure_steps", "step", _compound(rows, fields))
        writer.attrs(
            writer.f["holos/events/procedure_steps"],
            comment="t_start, t_end: seconds since the capture start; start_sample, "
            "end_sample: indices into /data/demo_0 (end exclusive)",
        )
    else:
        notes.skip("holos/events/procedure_steps", "no procedure steps")
    if ann.vlm:
        rows = [(v.t_mono, v.t_wall, v.prompt, v.output) for v in ann.vlm]
        fields = [("t_mono", "<f8"), ("t_wall", str), ("prompt", str), ("output", str)]
        _record_dataset(writer, "holos/vlm", "output", "vlm_record", _compound(rows, fields))
    else:
        notes.skip("holos/vlm/output", "no VLM outputs")
