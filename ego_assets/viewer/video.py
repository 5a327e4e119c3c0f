"""Camera video for the recording: the file's own compressed bytes, never re-encoded.

Rerun plays an MP4 asset and picks frames by their presentation timestamp (PTS). An
MP4 file is used as it is; another container (Holos writes QuickTime ``.mov``) is
remuxed into MP4 by PyAV with stream copy: the same compressed packets, a new box
structure. Frame PTS are read by Rerun's own demuxer, so they are exactly the
timestamps the viewer resolves.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

import av
import numpy as np
import rerun as rr

MP4_MIME = "video/mp4"


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
