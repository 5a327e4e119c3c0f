"""The cameras of an episode in the recording: frustums, videos, poses, 2D landmarks.

A video is the file's own compressed bytes, never re-encoded. Rerun plays an MP4 asset
and picks frames by their presentation timestamp (PTS). An MP4 file is used as it is;
another container (Holos writes QuickTime ``.mov``) is remuxed into MP4 by PyAV with
stream copy: the same compressed packets, a new box structure. Frame PTS are read by
Rerun's own demuxer, so they are exactly the timestamps the viewer resolves.

* ``world/device/<camera>``: a pinhole frustum from the camera calibration
  (``camera_from_device``).
* ``world/cameras/<role>`` (``cameras/<role>`` when the frames carry no camera pose):
  the video as a video asset with one frame reference per frame at the frame's own
  time (and its index on the ``frame_<role>`` timeline), the per-frame camera pose and
  pinhole; ``.../landmarks/<s>``: 2D hand landmarks over the image, in pixels.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

import av
import numpy as np
import pyarrow as pa
import rerun as rr

from ego_assets.quality.streams import validity
from ego_assets.trajectory.model import CameraCalibration, MediaRef, Trajectory
from ego_assets.trajectory.streams import Stream
from ego_assets.viewer.rerun_log import ArrowBatch, RecordingLog, entity, mat3x3_column
from ego_assets.viewer.tracks import HAND_RGB, OTHER_RGB, device_pose

MP4_MIME = "video/mp4"
# Camera axes of ``world_to_camera`` / ``camera_from_device`` by the frames stream's
# ``camera_axes`` attr: OpenCV (x right, y down, z forward), ARKit (x right, y up, -z).
CAMERA_AXES: dict[str, rr.components.ViewCoordinates] = {
    "opencv": rr.components.ViewCoordinates.RDF,
    "arkit": rr.components.ViewCoordinates.RUB,
}
DEFAULT_AXES = "opencv"
IMAGE_PLANE_M = 0.1
LANDMARK_RADIUS_PX = 2.0


@dataclass(frozen=True, slots=True)
class VideoAsset:
    """An MP4 video ready for the recording.

    Attributes:
        data: MP4 bytes (the source file, or its stream-copy remux).
        pts_ns: (F,) int64 presentation timestamps of the frames, in presentation order,
            nanoseconds from the start of the video.
        remuxed: whether ``data`` is a remux of another container.
    """

    data: bytes
    pts_ns: np.ndarray
    remuxed: bool


def remux_to_mp4(path: Path) -> bytes:
    """Copy the first video stream of ``path`` into an MP4 container (no decoding)."""
    sink = io.BytesIO()
    with av.open(str(path)) as source, av.open(sink, mode="w", format="mp4") as target:
        stream = source.streams.video[0]
        out = target.add_stream_from_template(stream)
        for packet in source.demux(stream):
            if packet.dts is None:  # the demuxer's end-of-stream flush packet
                continue
            packet.stream = out
            target.mux(packet)
    return sink.getvalue()


def load_video(path: Path, mime: str) -> VideoAsset:
    """The MP4 bytes and frame PTS of the video file ``path`` (MIME type ``mime``)."""
    remuxed = mime != MP4_MIME
    data = remux_to_mp4(path) if remuxed else Path(path).read_bytes()
    asset = rr.AssetVideo(contents=data, media_type=MP4_MIME)
    pts = np.asarray(asset.read_frame_timestamps_nanos(), np.int64)
    return VideoAsset(data, pts, remuxed)


# -- the cameras in the recording ---------------------------------------------------------

# A logged video: role -> (entity path, media).
Shown = dict[str, tuple[str, MediaRef]]


def _is_camera_of(media: MediaRef, cal: CameraCalibration) -> bool:
    """A video belongs to a calibrated camera: role equal to it or ``camera_<camera>``."""
    return media.kind == "video" and media.role in (cal.camera, f"camera_{cal.camera}")


def _axes(trajectory: Trajectory, media: MediaRef | None) -> rr.components.ViewCoordinates:
    """Camera axes of a video's frames stream (``camera_axes`` attr, default OpenCV)."""
    if media is None or not media.frames_stream:
        return CAMERA_AXES[DEFAULT_AXES]
    attrs = trajectory.stream(media.frames_stream).attrs
    return CAMERA_AXES[str(attrs.get("camera_axes", DEFAULT_AXES))]


def pinhole(cal: CameraCalibration, axes: rr.components.ViewCoordinates) -> rr.Pinhole:
    """The static pinhole of a calibrated camera (pixels)."""
    return rr.Pinhole(
        image_from_camera=np.array([[cal.fx, 0.0, cal.cx], [0.0, cal.fy, cal.cy], [0, 0, 1.0]]),
        resolution=[cal.width, cal.height],
        camera_xyz=axes,
        image_plane_distance=IMAGE_PLANE_M,
    )


def log_camera_frustums(log: RecordingLog, trajectory: Trajectory) -> None:
    """``world/device/<camera>``: each calibrated camera's frustum on the device pose."""
    if device_pose(trajectory) is None:
        return
    for cal in trajectory.info.cameras:
        media = next((m for m in trajectory.media if _is_camera_of(m, cal)), None)
        path = f"world/device/{cal.camera}"
        if cal.camera_from_device is not None:
            device_from_camera = np.linalg.inv(np.asarray(cal.camera_from_device).reshape(4, 4))
            log.static(
                path,
                rr.Transform3D(
                    translation=device_from_camera[:3, 3], mat3x3=device_from_camera[:3, :3]
                ),
            )
        log.static(path, pinhole(cal, _axes(trajectory, media)))


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


def log_videos(log: RecordingLog, trajectory: Trajectory, media_dir: Path | None) -> Shown:
    """Log every video with a frames stream; returns those logged."""
    shown: Shown = {}
    for media in trajectory.media:
        if media.kind != "video" or media.frames_stream is None:
            continue
        if media_dir is None:
            log.summary.notes.append(f"video {media.role!r}: raw media folder not given")
            continue
        file = media_dir / media.path
        if not file.is_file():
            log.summary.notes.append(f"video {media.role!r}: {media.path} not found")
            continue
        try:
            path = _log_video(log, trajectory, media, file)
        except RuntimeError as exc:  # a codec Rerun cannot play (e.g. imported Motion-JPEG)
            log.summary.notes.append(f"video {media.role!r}: not shown ({exc})")
            continue
        log.summary.videos[media.role] = path
        shown[media.role] = (path, media)
    return shown


def _log_video(log: RecordingLog, trajectory: Trajectory, media: MediaRef, file: Path) -> str:
    """One video: the asset, a frame reference per row of its frames stream, the camera."""
    assert media.frames_stream is not None
    frames = trajectory.stream(media.frames_stream)
    asset = load_video(file, media.mime)
    capture = f"capture {trajectory.info.capture_id!r}"
    pts_ns = frame_pts(asset.pts_ns, frames, capture, media.path)
    w2c = frames.fields.get("world_to_camera")
    posed = w2c is not None and bool(np.isfinite(w2c).all(axis=(1, 2)).any())
    path = entity("world/cameras" if posed else "cameras", media.role)
    log.static(path, rr.AssetVideo(contents=asset.data, media_type=MP4_MIME))
    log.send(
        path,
        frames.time,
        rr.VideoFrameReference.columns_nanos(pts_ns),
        extra=[rr.TimeColumn(f"frame_{media.role}", sequence=frames.fields["frame_index"])],
    )
    if w2c is not None and posed:
        ok = np.isfinite(w2c).all(axis=(1, 2))
        c2w = np.linalg.inv(w2c[ok])
        rotation = mat3x3_column(rr.Transform3D.descriptor_mat3x3(), c2w[:, :3, :3])
        columns = [*rr.Transform3D.columns(translation=c2w[:, :3, 3]), rotation]
        log.send(path, frames.time[ok], columns, count=False)
    axes = _axes(trajectory, media)
    if "intrinsics" in frames.fields:
        _log_intrinsics(log, path, frames, media, axes)
    else:
        cal = next((c for c in trajectory.info.cameras if _is_camera_of(media, c)), None)
        if cal is not None:
            log.static(path, pinhole(cal, axes))
    return path


def _log_intrinsics(
    log: RecordingLog,
    path: str,
    frames: Stream,
    media: MediaRef,
    axes: rr.components.ViewCoordinates,
) -> None:
    """The pinhole of every frame with finite ``intrinsics`` (fx, fy, cx, cy in pixels).

    Every Pinhole component goes on the same rows: a static part beside temporal
    intrinsics leaves the camera without a transform in the viewer (Rerun 0.41).
    """
    k = frames.fields["intrinsics"]
    ok = np.isfinite(k).all(axis=1)
    n = int(ok.sum())
    mats = np.zeros((n, 3, 3))
    mats[:, 0, 0], mats[:, 1, 1] = k[ok, 0], k[ok, 1]
    mats[:, 0, 2], mats[:, 1, 2], mats[:, 2, 2] = k[ok, 2], k[ok, 3], 1.0
    f32 = pa.field("item", pa.float32(), nullable=False)
    u8 = pa.field("item", pa.uint8(), nullable=False)
    resolution = np.tile(np.array([media.width, media.height], np.float32), n)
    xyz = np.tile(np.asarray(axes.as_arrow_array()[0].as_py(), np.uint8), n)
    columns = [
        mat3x3_column(rr.Pinhole.descriptor_image_from_camera(), mats),
        rr.ComponentColumn(
            rr.Pinhole.descriptor_resolution(),
            ArrowBatch(pa.FixedSizeListArray.from_arrays(resolution, type=pa.list_(f32, 2))),
        ),
        rr.ComponentColumn(
            rr.Pinhole.descriptor_camera_xyz(),
            ArrowBatch(pa.FixedSizeListArray.from_arrays(xyz, type=pa.list_(u8, 3))),
        ),
    ]
    log.send(path, frames.time[ok], columns, count=False)


def log_landmarks_2d(log: RecordingLog, trajectory: Trajectory, shown: Shown) -> None:
    """2D hand landmarks over the first logged video, in pixels (confidence 0 left out)."""
    streams = trajectory.streams_of_kind("hand_landmarks_2d")
    if not streams:
        return
    if not shown:
        log.summary.notes.append("2D landmarks without a video: not shown over an image")
        return
    cam_path, media = next(iter(shown.values()))
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
        log.static(path, rr.Points2D.from_fields(colors=[colour], radii=[LANDMARK_RADIUS_PX]))
        positions = rr.Points2D.columns(positions=pixels[ok].astype(np.float32))
        log.send(path, stream.time, positions.partition(ok.sum(axis=1)))
