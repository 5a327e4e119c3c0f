"""The head camera of imported datasets without timestamps (EgoDex, TACO-style MANO).

Such a source gives N frames of poses and one video: frame ``i`` is at ``i / fps`` on a
``device`` clock starting at 0 (declared as derived on every stream and as a quirk), the
video must hold at least N frames (more are kept and reported; a reader may accept a few
fewer where its dataset is known to have them: every pose frame is kept, the frames
stream lists only the frames the video holds, and a quirk names the pose frames without
a picture), and the camera matrix becomes per-frame ``intrinsics`` and the capture's
pinhole model.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ego_assets.capture.files import CaptureFiles
from ego_assets.capture.media import VideoProbe, probe_video
from ego_assets.capture.provenance import PROVENANCE_FILE, provenance_ref, read_provenance
from ego_assets.trajectory.model import CameraCalibration, FileRef, MediaRef, Quirk
from ego_assets.trajectory.streams import AttrValue, Stream, make_stream

FRAMES_STREAM = "video_frames"


@dataclass(frozen=True, slots=True)
class HeadVideo:
    """The probed video of ``rel`` and the derived clock of its ``frames`` pose frames."""

    rel: str
    probe: VideoProbe
    fps: float
    timestamp_ns: np.ndarray  # (frames,) int64, i / fps s in ns

    @property
    def attrs(self) -> dict[str, AttrValue]:
        """Attrs every stream on this clock carries (rate, the derived time source)."""
        derived = f"derived: frame_index / {self.fps:g} s (the source has no timestamps)"
        return {"nominal_rate_hz": self.fps, "time_source": derived}

    @property
    def pictures(self) -> int:
        """Pose frames with a picture: the first ``min(video frames, pose frames)``."""
        return min(self.probe.frame_count, len(self.timestamp_ns))

    def quirks(self) -> list[Quirk]:
        n = len(self.timestamp_ns)
        quirks = [Quirk(self.rel, f"no timestamps: frame i is at i / {self.fps:g} s (derived)", n)]
        if self.probe.frame_count > n:
            extra = self.probe.frame_count - n
            quirks.append(Quirk(self.rel, f"video holds {extra} frames more than the poses"))
        elif self.pictures < n:
            missing = n - self.pictures
            quirks.append(
                Quirk(
                    self.rel,
                    f"video holds {missing} frames fewer than the poses: pose frames "
                    f"{self.pictures + 1} to {n} have no picture (kept, not in {FRAMES_STREAM})",
                    missing,
                    "frames",
                )
            )
        return quirks

    def frames_stream(
        self, k: np.ndarray, world_to_camera: np.ndarray, axes: str, source_file: str
    ) -> Stream:
        """``video_frames`` of the frames the video holds (`pictures`): frame index, the
        3x3 ``k`` per frame, ``world_to_camera`` ((pose frames, 4, 4), cut to them)."""
        n = self.pictures
        fields = {
            "frame_index": np.arange(n, dtype=np.int64),
            "intrinsics": np.tile([k[0, 0], k[1, 1], k[0, 2], k[1, 2]], (n, 1)),
            "world_to_camera": world_to_camera[:n],
        }
        attrs = {**self.attrs, "media": "video", "camera_axes": axes, "source_file": source_file}
        ts = self.timestamp_ns[:n]
        return make_stream(FRAMES_STREAM, "media_frames", ts, 0, fields, attrs)

    def cameras(self, k: np.ndarray) -> tuple[CameraCalibration, ...]:
        """The video's pinhole model from ``k`` (none when the container gives no size)."""
        if self.probe.width <= 0 or self.probe.height <= 0:
            return ()
        w, h = self.probe.width, self.probe.height
        fx, fy, cx, cy = (float(v) for v in (k[0, 0], k[1, 1], k[0, 2], k[1, 2]))
        return (CameraCalibration("video", "pinhole", w, h, fx, fy, cx, cy),)

    def media(self) -> MediaRef:
        return self.probe.media_ref(
            "video", self.rel, "video/mp4", frames_stream=FRAMES_STREAM, start_ns=0
        )


def head_video(
    files: CaptureFiles,
    rel: str,
    frames: int,
    what: str,
    fps: float | None = None,
    short_by: int = 0,
) -> HeadVideo:
    """Probe ``rel`` for ``frames`` pose frames (``what`` names them in the error).

    ``fps``: the source's stated rate; default the video's own. ``short_by``: how many
    frames fewer than the poses the video may hold (a known quirk of the dataset; kept
    and reported by `HeadVideo.quirks`).

    Raises:
        CaptureFormatError: the video is unreadable, states no rate, or holds more than
            ``short_by`` frames fewer than the poses (field ``frames``).
    """
    probe = probe_video(files, rel)
    if probe.frame_count < frames - short_by:
        message = f"holds {probe.frame_count} frames but the {what} hold {frames}"
        raise files.error(rel, message, field="frames")
    rate = fps if fps is not None else probe.fps
    if rate <= 0:
        raise files.error(rel, "the video states no frame rate", field="fps")
    ts = np.round(np.arange(frames) * (1e9 / rate)).astype(np.int64)
    return HeadVideo(rel, probe, float(rate), ts)


def imported_from(files: CaptureFiles) -> tuple[Mapping[str, Any] | None, str, list[FileRef]]:
    """(provenance or None, original path, its `FileRef`s) of a possibly imported capture."""
    if not files.exists(PROVENANCE_FILE):
        return None, "", []
    provenance = read_provenance(files)
    return provenance, str(provenance["original_path"]), [provenance_ref()]
