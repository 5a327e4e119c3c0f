"""The sample of frames behind LeRobot's camera statistics, shared by two decodes of a video.

CERES's ``meta/stats.json`` describes the camera by per-channel counts of the RGB values
of up to `STATS_SAMPLES` evenly spread frames (`sample_indices`), each scaled to
`STATS_LONG_SIDE` pixels on its long side (`frame_histogram`). For a short video
`lerobot_video.remux` decodes the frames to count them; EgoSmith
(`egosmith_webdataset.write_episode`) decodes every frame of the same raw video to
JPEG-encode it. When both run in one process (the landing sensor's inline path, a
capture run's in-process steps), EgoSmith's pass counts the sample on its encode
workers (`FrameSampler`) and leaves the result here (`publish`), keyed by the video
file's identity; the remux then takes it (`shared`) and decodes nothing, when the frame
count and the sampled frames' timestamps are those it would sample. The counts are
then the same numbers: the sampled frames are the same pictures (H.264, HEVC and AV1
decode bit-exactly with or without frame threads) scaled the same way.

A process whose EgoSmith export will not be followed by a CERES export of the same video
(its steps run in processes of their own: a multiprocess, Celery or Kubernetes executor)
turns the counting off (`sharing(False)`): it costs EgoSmith about 0.3 ms a sampled frame
at 320x240 and 1.1 ms at 1080p, for nobody.

The cache keeps the last `MAX_SHARED` videos' samples (a few kilobytes each), in this
process only. A video rewritten or replaced in place gets a new identity (inode, size,
modification or change time), so a stale sample is never taken.
"""

from __future__ import annotations

import contextlib
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

if TYPE_CHECKING:
    import av  # imported where used: a code location defining assets loads no PyAV
    from av.video.reformatter import VideoReformatter

# Frames sampled for the camera statistics, and their size (long side, pixels).
STATS_SAMPLES = 100
STATS_LONG_SIDE = 160
# Up to this many frames a video's sample is spread over all of them (the remux decodes
# them, or takes a decode's sample from here); a longer one's is taken from its keyframes
# (`lerobot_video.remux`), so a decode leaves none.
SHORT_VIDEO_FRAMES = 3 * STATS_SAMPLES
# Videos whose sample this process keeps (`publish`), the oldest dropped first: more than
# a ranged run's step exports one after another (a backfill chunk, 50 captures).
MAX_SHARED = 128

FileIdentity = tuple[str, int, int, int, int, int]
T = TypeVar("T")
# Whether a decode in this context counts its sample for a later one (`sharing`).
_SHARING: ContextVar[bool] = ContextVar("camera_sample_sharing", default=True)


@contextlib.contextmanager
def sharing(enabled: bool) -> Iterator[None]:
    """Within this block (this thread or task), samplers made count frames only when
    ``enabled``: off where no later decode of the same video in this process will ask."""
    token = _SHARING.set(enabled)
    try:
        yield
    finally:
        _SHARING.reset(token)


def sample_indices(n: int, k: int | None = None) -> np.ndarray:
    """Up to ``k`` (default `STATS_SAMPLES`) evenly spread indices of ``range(n)`` (int64,
    increasing)."""
    k = STATS_SAMPLES if k is None else k
    if n <= k:
        return np.arange(n)
    return np.unique(np.linspace(0, n - 1, k).round().astype(np.int64))


def frame_histogram(frame: av.VideoFrame, reformatter: VideoReformatter) -> np.ndarray:
    """(3, 256) int64 counts of a frame's RGB values, downscaled to `STATS_LONG_SIDE` by
    ``reformatter`` (one a video or a thread: its scaler is set up once, not once a frame
    as ``frame.reformat`` does; the same pixels)."""
    scale = STATS_LONG_SIDE / max(frame.width, frame.height)
    width = max(2, round(frame.width * min(scale, 1.0)))
    height = max(2, round(frame.height * min(scale, 1.0)))
    rgb = reformatter.reformat(frame, width=width, height=height, format="rgb24").to_ndarray()
    # Pillow counts the three bands in one pass in C: the counts of np.bincount per channel
    # at less than half its cost (36 against 83 us at 160x120); imported here, by the
    # steps that decode (a capture run's definitions load no Pillow)
    from PIL import Image

    return np.asarray(Image.fromarray(rgb).histogram(), dtype=np.int64).reshape(3, 256)


_THREAD = threading.local()


def thread_reformatter() -> VideoReformatter:
    """This thread's scaler for `frame_histogram` (a `VideoReformatter` is not shared
    between threads)."""
    reformatter = getattr(_THREAD, "reformatter", None)
    if reformatter is None:
        import av.video.reformatter

        reformatter = _THREAD.reformatter = av.video.reformatter.VideoReformatter()
    return reformatter


@dataclass(frozen=True, slots=True)
class SampledFrames:
    """What one decode of a whole video counted for the camera statistics.

    Attributes:
        frames: frames the decode gave (presentation order).
        pts: (S,) int64 presentation time of each sampled frame (``sample_indices(frames)``
            of the decode's output), in the stream's time base; -1 for a frame without one.
        histogram: (3, 256) int64 RGB value counts of those frames (`frame_histogram`).
        images: frames counted (S).
    """

    frames: int
    pts: np.ndarray
    histogram: np.ndarray
    images: int

    def matches(self, frames: int, pts: np.ndarray) -> bool:
        """Whether this is the sample of a video of ``frames`` frames whose sampled frames
        (``sample_indices(frames)`` in presentation order) have presentation times ``pts``."""
        return self.frames == frames and np.array_equal(self.pts, pts)


class FrameSampler:
    """Counts the sampled frames of one decode pass over a video of ``frames`` frames
    (none beyond `SHORT_VIDEO_FRAMES`: the remux samples keyframes there, and none when
    made outside `sharing`).

    `observe` is called from any thread (the encode workers) with each frame's index in
    the decode's output; it counts only the sampled ones. `result` gives the sample once
    the pass has seen every frame, `publish` leaves it for the file ``video`` (its
    `file_identity` when the sampler was made, before the decode).
    """

    def __init__(self, frames: int, video: Path | None = None) -> None:
        short = frames <= SHORT_VIDEO_FRAMES and _SHARING.get()
        self.wanted = frozenset(sample_indices(frames).tolist() if short else ())
        self.identity: FileIdentity | None = None
        if video is not None and short:
            with contextlib.suppress(OSError):  # the decode says what is wrong with it
                self.identity = file_identity(video)
        self._lock = threading.Lock()
        self._pts: dict[int, int] = {}
        self._histogram = np.zeros((3, 256), dtype=np.int64)

    def observe(self, index: int, frame: av.VideoFrame) -> None:
        """Count frame ``index`` of the decode if it is sampled (on the caller's thread)."""
        if index not in self.wanted:
            return
        counts = frame_histogram(frame, thread_reformatter())
        with self._lock:
            self._pts[index] = -1 if frame.pts is None else int(frame.pts)
            self._histogram += counts

    def observing(self, encode: Callable[..., T]) -> Callable[..., T]:
        """``encode(index, frame, *rest)`` that first counts the frame (`observe`)."""

        def observed(index: int, frame: av.VideoFrame, *rest: Any) -> T:
            self.observe(index, frame)
            return encode(index, frame, *rest)

        return observed

    def publish(self, frames: int) -> None:
        """Leave the sample of a pass that gave ``frames`` frames for the video (`publish`),
        when it saw every sampled frame."""
        sampled = self.result(frames)
        if sampled is not None and self.identity is not None:
            publish(self.identity, sampled)

    def result(self, frames: int) -> SampledFrames | None:
        """The sample of a pass that gave ``frames`` frames (None if it missed some)."""
        with self._lock:
            if not self.wanted or set(self._pts) != set(sample_indices(frames).tolist()):
                return None
            pts = np.asarray([self._pts[i] for i in sorted(self._pts)], dtype=np.int64)
            return SampledFrames(frames, pts, self._histogram.copy(), len(pts))


_SHARED: OrderedDict[FileIdentity, SampledFrames] = OrderedDict()
_SHARED_LOCK = threading.Lock()


def file_identity(path: Path) -> FileIdentity:
    """What names one version of a file: its resolved path, device, inode, size and
    modification and change times (ns); a rewrite or a replacement changes it."""
    st = Path(path).stat()
    resolved = str(Path(path).resolve())
    return (resolved, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def publish(identity: FileIdentity, sampled: SampledFrames) -> None:
    """Keep ``sampled`` as the sample of the file version ``identity`` (`file_identity`
    taken before it was decoded), dropping the oldest beyond `MAX_SHARED`."""
    with _SHARED_LOCK:
        _SHARED[identity] = sampled
        _SHARED.move_to_end(identity)
        while len(_SHARED) > MAX_SHARED:
            _SHARED.popitem(last=False)


def shared(path: Path) -> SampledFrames | None:
    """The sample a decode of the file ``path``, as it is now, left in this process."""
    try:
        identity = file_identity(path)
    except OSError:
        return None
    with _SHARED_LOCK:
        return _SHARED.get(identity)


def clear_shared() -> None:
    """Forget every sample `publish` kept."""
    with _SHARED_LOCK:
        _SHARED.clear()
