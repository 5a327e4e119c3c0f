"""Holos HDF5: the root attributes and scales, robomimic's groups and ``/data/demo_0``
(the one-clock view robomimic reads).

Part of the writer of `ego_assets.formats.holos_hdf5` (the format: docs/formats/holos-hdf5.md).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ego_assets.formats.holos_clock import (
    MasterClock,
    Rows,
    Track,
    hold_index,
    hold_rows,
    nearest_index,
    pick_master,
    same_rows,
    wrist_delta,
)
from ego_assets.formats.holos_h5 import H5Writer, next_row_view, write_attrs
from ego_assets.formats.holos_tracks import (
    CaptureTracks,
    joint_keep,
    joint_names,
    joint_pick,
    landmark_points,
    skeleton_rows,
    track_validity,
)
from ego_assets.formats.holos_writer import (
    ACTION_DERIVATION,
    ACTION_DERIVATION_DEVICE,
    ACTION_DERIVATION_POSITION,
    AXIS_XYZ,
    CONVENTION_VERSION,
    CONVENTIONS,
    DEMO,
    ENV_NAME,
    ENV_TYPE_NO_SIMULATOR,
    EXPORTER_VERSION,
    IMAGE_UV,
    POSE_COMPONENTS,
    REFERENCES,
    RESAMPLING,
    SIDES,
    ExportNotes,
    iso_utc,
    label_text,
)
from ego_assets.trajectory.joints import JOINT_SETS, WRIST
from ego_assets.trajectory.model import Trajectory
from ego_assets.trajectory.records import to_jsonable
from ego_assets.trajectory.streams import Stream

if TYPE_CHECKING:
    import h5py  # imported where used: a code location defining assets loads no h5py

# ------------------------------------------------------------------------ writing


def _capture_start(trajectory: Trajectory) -> str:
    info = trajectory.info
    if info.clock == "epoch":
        return iso_utc(info.start_ns)
    return f"{iso_utc(info.start_ns)} (device clock read as Unix time, no epoch)"


def time_units(trajectory: Trajectory) -> str:
    """CF units of every ``time``: seconds since the capture start, ISO-8601 UTC.

    A device clock without an epoch (Project Aria MPS) is read as if it were Unix time;
    the root ``clock`` attribute and each ``time``'s ``comment`` say so.
    """
    return f"seconds since {iso_utc(trajectory.info.start_ns)}"


def write_root_attrs(f: h5py.File, trajectory: Trajectory, history_time: str) -> None:
    info = trajectory.info
    source = " / ".join(p for p in (info.device, info.app) if p) or info.source_kind
    attrs: dict[str, Any] = {
        "Conventions": CONVENTIONS,
        "holos_convention_version": CONVENTION_VERSION,
        "title": info.title or f"capture {info.capture_id}",
        "institution": info.institution or "unknown (the capture does not say)",
        "source": f"{source} ({info.source_kind}, {info.source_version})",
        "history": f"{history_time} written by ego_assets {EXPORTER_VERSION}",
        "references": REFERENCES,
        "capture_id": info.source_capture_id or info.capture_id,
        "organization_id": info.organization_id,
        "modality": info.modality or info.source_kind,
        "capture_start": _capture_start(trajectory),
        "platform_capture_key": info.capture_id,
        "source_kind": info.source_kind,
        "clock": info.clock,
    }
    write_attrs(f, attrs.items())


def write_root_scales(writer: H5Writer, tracks: CaptureTracks) -> dict[str, h5py.Dataset]:
    root = writer.f["/"]
    scales = {
        "pose_component": writer.string_scale(root, "pose_component", POSE_COMPONENTS),
        "axis_xyz": writer.string_scale(root, "axis_xyz", AXIS_XYZ),
        "demo": writer.string_scale(root, "demo", ["demo_0"]),
    }
    writer.attrs(scales["pose_component"], long_name="pose components: position m, quaternion xyzw")
    if tracks.joint_set is not None:
        joint = writer.string_scale(root, "joint", joint_names(tracks.joint_set))
        omitted = [
            n for n in JOINT_SETS[tracks.joint_set] if n not in joint_names(tracks.joint_set)
        ]
        attrs = {
            "long_name": "hand skeleton joint",
            "joint_set": tracks.joint_set,
            "omitted_joints": ", ".join(omitted),
        }
        if omitted:
            attrs["comment"] = (
                f"{tracks.joint_set} has {len(JOINT_SETS[tracks.joint_set])} joints; "
                f"{', '.join(omitted)} is left out of the whole file so that forearmWrist "
                "keeps its place in the 26-joint ARKit HandSkeleton scale"
            )
        writer.attrs(joint, **attrs)
        scales["joint"] = joint
    if tracks.landmark_set is not None:
        landmark = writer.string_scale(root, "landmark", JOINT_SETS[tracks.landmark_set])
        writer.attrs(landmark, long_name="hand landmark", joint_set=tracks.landmark_set)
        scales["landmark"] = landmark
    if tracks.landmarks_2d:
        scales["image_uv"] = writer.string_scale(root, "image_uv", IMAGE_UV)
    if tracks.objects is not None:
        ids = sorted(set(tracks.objects.fields["anchor_id"].tolist()))
        obj = writer.string_scale(root, "tracked_object", ids)
        writer.attrs(obj, long_name="tracked object anchor id")
        names: dict[str, str] = {}
        for anchor, name in zip(
            tracks.objects.fields["anchor_id"].tolist(),
            tracks.objects.fields["anchor_name"].tolist(),
            strict=True,
        ):
            names.setdefault(anchor, name)
        writer.strings(root, "tracked_object_name", [names[i] for i in ids], [obj])
        scales["tracked_object"] = obj
    return scales


def write_robomimic_groups(writer: H5Writer, trajectory: Trajectory, samples: int) -> None:
    data = writer.group("data")
    env_kwargs = to_jsonable(trajectory.info)
    env_args = {"env_name": ENV_NAME, "type": ENV_TYPE_NO_SIMULATOR, "env_kwargs": env_kwargs}
    writer.attrs(data, total=np.int64(samples), env_args=json.dumps(env_args, sort_keys=True))
    mask = writer.group("mask")
    writer.strings(mask, "all", ["demo_0"], [writer.f["demo"]])


def _demo_attrs(demo: h5py.Group, trajectory: Trajectory, master: MasterClock) -> None:
    info = trajectory.info
    H5Writer.attrs(
        demo,
        num_samples=np.int64(len(master.timestamp_ns)),
        frame=f"{info.world_frame}",
        handedness=info.handedness,
        up_axis=info.up_axis,
        quaternion_order=info.quaternion_order,
        length_unit=info.length_unit,
        master_clock=master.description,
        resampling=RESAMPLING,
    )


@dataclass
class Section:
    """One part of the file and what every part's writer needs."""

    writer: H5Writer
    trajectory: Trajectory
    tracks: CaptureTracks
    scales: dict
    notes: ExportNotes

    def __post_init__(self) -> None:
        """Per-part set-up after the shared fields are stored."""


class DemoSection(Section):
    """Writes ``/data/demo_0``: the one-clock view robomimic reads."""

    def __post_init__(self) -> None:
        trajectory, tracks, writer = self.trajectory, self.tracks, self.writer
        self.master = pick_master(tracks.skeleton_world, tracks.landmarks, tracks.device)
        self.ns = self.master.timestamp_ns
        self.time_s = (self.ns - np.int64(trajectory.info.start_ns)).astype(np.float64) / 1e9
        self.demo = writer.group(DEMO)
        self.obs = writer.group(f"{DEMO}/obs")
        self.time = writer.time_scale(self.demo, self.time_s, time_units(trajectory))
        self.wrists: dict[str, np.ndarray] = {}
        self.device_pose: np.ndarray | None = None
        self.labelled: set[str] = set()  # axes whose labels ``obs`` holds

    def hold(self, track: Track) -> tuple[np.ndarray, np.ndarray]:
        index, held = hold_index(track.timestamp_ns, self.ns)
        return index, held

    def obs_data(
        self, name: str, values: np.ndarray | Rows, dims: list, units: str, long_name: str, **a
    ):
        self.writer.data(self.obs, name, values, [self.time, *dims], units, long_name, **a)
        self.notes.obs.append(name)
        for scale in dims:
            self.axis_labels(scale)

    def axis_labels(self, scale: h5py.Dataset) -> None:
        """A copy of a root scale's labels inside ``obs``, on that scale's axis.

        xarray's ``open_dataset(group="data/demo_0/obs")`` sees only the group's own
        variables; a variable named like its dimension becomes that axis's index, so
        ``.sel(joint="forearmWrist")`` works. robomimic reads only the obs keys it is given.
        """
        name = scale.name.rsplit("/", 1)[-1]
        if name in self.labelled:
            return
        self.labelled.add(name)
        if name in self.obs:
            return
        ds = self.writer.strings(self.obs, name, [label_text(v) for v in scale[...]], [scale])
        self.writer.attrs(ds, long_name=f"labels of the {name} axis (copy of /{name})")

    def write(self) -> None:
        t = self.tracks
        _demo_attrs(self.demo, self.trajectory, self.master)
        self.writer.data(
            self.demo,
            "timestamp_ns",
            self.ns,
            [self.time],
            "ns",
            "nanoseconds since the Unix epoch (ROS 2 convention)"
            if self.trajectory.info.clock == "epoch"
            else "nanoseconds on the device clock",
        )
        self.obs_data("timestamp", self.time_s, [], "s", "seconds since the capture start")
        pc = self.scales["pose_component"]
        if t.device is not None:
            index, held = self.hold(t.device)
            pose = np.concatenate([t.device.field("position"), t.device.field("rotation")], axis=1)
            self.device_pose = hold_rows(pose, index, held & track_validity(t.device)[index])
            self.obs_data(
                "device_pose",
                self.device_pose,
                [pc],
                "m",
                "device (headset or phone) pose: position m, quaternion xyzw",
                frame=self.trajectory.info.world_frame,
            )
        else:
            self.notes.skip("obs/device_pose", "no device pose stream")
        self._skeletons()
        self._landmarks()
        self._objects()
        self._imu()
        self._actions_states()

    def _skeletons(self) -> None:
        t = self.tracks
        for frame, tracks, label in (
            ("world", t.skeleton_world, "world"),
            ("local", t.skeleton_local, "relative to the wrist anchor"),
        ):
            for side in SIDES:
                name = f"hand_{side}_joints_{frame}"
                track = tracks.get(side)
                if track is None or t.joint_set is None:
                    self.notes.skip(f"obs/{name}", f"no {side} hand skeleton ({frame})")
                    continue
                pick = joint_pick(t.joint_set)
                index, held = self.hold(track)
                values, valid = skeleton_rows(track, pick, index, held)
                self.obs_data(
                    name,
                    values,
                    [self.scales["joint"], self.scales["pose_component"]],
                    "m",
                    f"{side} hand joint poses {label}: position m, quaternion xyzw",
                    frame=str(track.streams[0].attrs.get("frame")),
                    comment="x, y, z in metres; qx, qy, qz, qw unitless",
                )
                if frame == "world":
                    wrist = joint_names(t.joint_set).index("wrist")
                    source = int(joint_keep(t.joint_set)[wrist])
                    column = valid[:, wrist]
                    self.wrists[side] = Rows(
                        values.parts,
                        values.dtype,
                        index=values.index,
                        pick=source,
                        valid=None if column.all() else column,
                    ).array()

    def _landmarks(self) -> None:
        t = self.tracks
        for side in SIDES:
            name = f"hand_{side}_landmarks_3d"
            track = t.landmarks.get(side)
            if track is None:
                self.notes.skip(f"obs/{name}", f"no {side} hand 3D landmarks")
                self.notes.skip(f"obs/hand_{side}_landmarks_confidence", f"no {side} landmarks")
                continue
            points, conf = landmark_points(track)
            index, held = self.hold(track)
            valid = held & track_validity(track)[index]
            mask = None if valid.all() else valid
            values = Rows((points,), np.dtype(np.float64), index=same_rows(index), valid=mask)
            dims = [self.scales["landmark"], self.scales["axis_xyz"]]
            frame = str(track.streams[0].attrs.get("frame", "world"))
            self.obs_data(name, values, dims, "m", f"{side} hand 3D landmarks", frame=frame)
            self.obs_data(
                f"hand_{side}_landmarks_confidence",
                hold_rows(conf, index, held),
                [self.scales["landmark"]],
                "1",
                f"{side} hand per-landmark confidence, 0 = not seen",
            )
            if side not in self.wrists:
                wrist = WRIST[t.landmark_set or ""]  # MediaPipe spells it "WRIST"
                self.wrists[side] = Rows(
                    values.parts, values.dtype, index=values.index, pick=wrist, valid=mask
                ).array()

    def _objects(self) -> None:
        stream = self.tracks.objects
        if stream is None:
            self.notes.skip("obs/object_pose", "no tracked object anchors")
            return
        ids = [label_text(s) for s in self.scales["tracked_object"][...]]
        anchor = np.asarray(stream.fields["anchor_id"].tolist(), dtype=object)
        pose = np.concatenate([stream.fields["position"], stream.fields["rotation"]], axis=1)
        out = np.full((len(self.ns), len(ids), 7), np.nan)
        for k, anchor_id in enumerate(ids):
            rows = np.flatnonzero(anchor == anchor_id)
            index, held = hold_index(stream.timestamp_ns[rows], self.ns)
            out[:, k] = hold_rows(pose[rows], index, held & stream.fields["valid"][rows][index])
        self.obs_data(
            "object_pose",
            out,
            [self.scales["tracked_object"], self.scales["pose_component"]],
            "m",
            "tracked object anchor poses: position m, quaternion xyzw",
            frame=str(stream.attrs.get("frame")),
        )

    def _imu(self) -> None:
        imu = self.tracks.imu
        if imu is None:
            self.notes.skip("obs/imu_accel", "no IMU stream")
            self.notes.skip("obs/imu_gyro", "no IMU stream")
            return
        index, held = hold_index(imu.timestamp_ns, self.ns)
        xyz = [self.scales["axis_xyz"]]
        frame = str(imu.attrs.get("frame"))
        self.obs_data(
            "imu_accel",
            hold_rows(imu.fields["accel"], index, held),
            xyz,
            "m s-2",
            "user acceleration, device frame",
            frame=frame,
        )
        self.obs_data(
            "imu_gyro",
            hold_rows(imu.fields["gyro"], index, held),
            xyz,
            "rad s-1",
            "rotation rate, device frame",
            frame=frame,
        )

    def _actions_states(self) -> None:
        track = self.master.track
        n = len(self.ns)
        if track is not None and track.role != "device" and track.side in self.wrists:
            side = track.side
            pose = self.wrists[side]
            derivation = ACTION_DERIVATION if pose.shape[1] == 7 else ACTION_DERIVATION_POSITION
        elif self.device_pose is not None:
            side, pose, derivation = "none", self.device_pose, ACTION_DERIVATION_DEVICE
        else:
            side, pose = "none", np.full((n, 7), np.nan)
            derivation = "no hand or device pose: identity on every row"
        actions = wrist_delta(pose)
        names = [f"d{c}" for c in POSE_COMPONENTS[: actions.shape[1]]]
        action_scale = self.writer.string_scale(self.demo, "action_component", names)
        ds = self.writer.data(
            self.demo,
            "actions",
            actions,
            [self.time, action_scale],
            "m",
            "wrist pose delta to the next sample: position m, quaternion xyzw",
            derivation=derivation,
            source_hand=side,
        )
        del ds.attrs["_FillValue"]  # never NaN
        parts: list[tuple[str, np.ndarray, Sequence[str]]] = []
        if self.device_pose is not None:
            parts.append(("device_pose", self.device_pose, POSE_COMPONENTS))
        for s in SIDES:
            if s in self.wrists:
                width = self.wrists[s].shape[1]
                parts.append((f"hand_{s}_wrist", self.wrists[s], POSE_COMPONENTS[:width]))
        states = np.concatenate([p[1] for p in parts], axis=1) if parts else np.zeros((n, 0))
        labels = [f"{name}.{c}" for name, _, comps in parts for c in comps]
        state_scale = self.writer.string_scale(self.demo, "state_component", labels)
        self.writer.data(
            self.demo,
            "states",
            states,
            [self.time, state_scale],
            "m",
            "device pose and wrist poses on the demo clock (layout on state_component)",
            comment="positions in metres, quaternions xyzw unitless; NaN where not tracked",
        )

    def next_obs(self) -> None:
        """``next_obs/<key>``: each obs key shifted by one sample, as a virtual dataset.

        robomimic reads ``next_obs`` by default (``load_next_obs=True``). The mapping
        points into this file (source file ``.``), so it costs no copy and survives a
        rename; the last row repeats the last sample. Scales and attributes (``units``,
        ``long_name``, ``_FillValue``, ``frame``) are the obs key's (`next_row_view`).
        """
        group = self.writer.group(f"{DEMO}/next_obs")
        for key in self.notes.obs:
            comment = f"obs/{key} one sample later (virtual; last row repeated)"
            next_row_view(group, self.obs, key, f"/{DEMO}/obs/{key}", comment)

    def frame_index(self, camera: str, frames: Stream) -> None:
        values = nearest_index(frames.timestamp_ns, self.ns)
        self.obs_data(
            f"{camera}_frame_index",
            values,
            [],
            "1",
            f"row of /holos/raw/video/{camera}/frames nearest each demo sample (-1: none)",
        )
