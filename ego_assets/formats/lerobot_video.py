"""Camera video for LeRobotDataset v3 episodes with PyAV: stream copy when possible.

LeRobot decodes the frame of row ``k`` at ``from_timestamp + k / fps`` and fails when
the closest decoded frame is more than 1e-4 s away, so every mp4 written here is
constant frame rate with frame ``k`` at exactly ``k / fps`` (pts ``k`` in a 1/fps time
base) and exactly one frame per exported row.

* `remux`: the source already holds one frame per row, in order, on a uniform time
  grid: packets are copied unchanged (no decoding, no re-encoding); only their
  timestamps are rescaled so that frame ``k`` sits at ``k / fps``.
* `reencode`: rows drop source frames (retried segments cut out) or repeat them
  (dropped source frames held), or the source is not remuxable (codec, pixel format,
  irregular timestamps): frames are decoded once, in order, and encoded with
  `ENCODER` (H.264, yuv420p). Groups of pictures no row uses are never sent to the
  decoder. With several cores the rows are cut into one part per core, each decoded
  and encoded on its own thread by its own single-threaded decoder and encoder (GOP 2:
  every part starts with a keyframe, as the whole would); the first part is written
  into the mp4 directly, the others into NUT files beside it whose packets are then
  copied into the mp4 in order. FFmpeg's own frame threads would cost more: x264 spends
  about 20 % more CPU per frame with them, and a decoder thread feeding one encoder
  thread leaves the slower stage (encoding) alone on its core. On one core, decoding
  (a background thread) overlaps encoding (the caller's thread).

Both also return per-channel pixel statistics of a sample of frames (values in [0, 1],
LeRobot's convention for camera stats; the sample and its counts: `camera_sample`). On
the remux path a long video's sample is taken from keyframes so no other frame is
decoded; a short one's (every frame up to `SHORT_VIDEO_FRAMES`) is the sample a decode
of the whole file left in this process (EgoSmith's, `camera_sample.shared`) when there
is one, and nothing is decoded; otherwise every reference frame and the sampled frames
are decoded, skipping the frames nothing refers to that are not sampled (the decoded
pictures are the same).
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Iterator
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ego_assets.formats import camera_sample
from ego_assets.formats.camera_sample import (
    SHORT_VIDEO_FRAMES,
    SampledFrames,
    frame_histogram,
    sample_indices,
)

if TYPE_CHECKING:
    import av  # imported where used: a code location defining assets loads no PyAV

# Codecs and pixel format LeRobot's decoders (PyAV, torchcodec) read from an mp4.
REMUX_CODECS = frozenset({"h264", "hevc", "av1"})
PIX_FMT = "yuv420p"
# Re-encoding: H.264 (the spec's codec; x264 is in every PyAV wheel) with LeRobot's own
# encoder settings for it: yuv420p, GOP 2 (random access decodes at most one extra
# frame), CRF 30 (`lerobot.datasets.video_utils._get_codec_options`). Preset ultrafast
# (no CABAC, no B-frames): ~2.5x the encode speed of veryfast and cheaper to decode for
# training loaders, for larger files; only cut or gappy footage is re-encoded, aligned
# video is copied. ``thread_type`` AUTO: frame threads when the encoder has several
# (PyAV's default, SLICE, makes x264 cut every frame into slices, which costs ~7 % more
# CPU); `reencode` gives it one thread (its decoder runs on another).
ENCODER: dict[str, Any] = {
    "codec": "libx264",
    "options": {"preset": "ultrafast", "crf": "30", "g": "2"},
    "thread_type": "AUTO",
}
# Decoded frames the decoding thread may run ahead of the encoder.
DECODE_AHEAD = 8
# Re-encoding in parts: at most this many, of at least this many rows each.
MAX_PARTS = 8
MIN_PART_ROWS = 300
MUX_OPTIONS = {"fflags": "+bitexact"}


@dataclass(frozen=True, slots=True)
class SourceVideo:
    """What one pass over the packets says about the first video stream of a file.

    Attributes:
        codec: FFmpeg's name of the codec (``av1``), not of its decoder (``libdav1d``).
        pix_fmt: pixel format of the decoded frames (``None`` when unknown).
        width, height: frame size, pixels.
        frames: number of video packets (= frames).
        uniform: presentation times are ``offset + k * step`` for frame ``k`` (and
            decode times lie on the same grid), so a remux can rescale them exactly.
        keyframes: (K,) int64 presentation index of each keyframe.
        pts_offset, pts_step: first presentation time and frame step, in the stream's
            time base (meaningful when ``uniform``).
        packet_frames: (P,) presentation index of each packet in decode order, and
        packet_keys: (P,) whether it is a keyframe (both empty when some packet lacks
            a presentation time).
        pts: (F,) presentation times in presentation order (empty as above).
    """

    codec: str
    pix_fmt: str | None
    width: int
    height: int
    frames: int
    uniform: bool
    keyframes: np.ndarray
    pts_offset: int = 0
    pts_step: int = 1
    packet_frames: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    packet_keys: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    pts: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))

    @property
    def remuxable(self) -> bool:
        return self.uniform and self.codec in REMUX_CODECS and self.pix_fmt == PIX_FMT


@dataclass(frozen=True, slots=True)
class PixelStats:
    """Per-channel histogram of sampled RGB pixel values (0..255) and the image count."""

    histogram: np.ndarray  # (3, 256) int64
    images: int

    def stats(self) -> dict[str, np.ndarray]:
        """LeRobot camera stats: every value shaped (3, 1, 1), pixels scaled to [0, 1]."""
        return histogram_stats(self.histogram, self.images)


@dataclass(frozen=True, slots=True)
class VideoResult:
    """What `remux` / `reencode` wrote: frame count, whether packets were copied, pixels."""

    frames: int
    remuxed: bool
    pixels: PixelStats


def _timing(path: Path) -> tuple[SourceVideo, np.ndarray, np.ndarray, Fraction]:
    """Packet pts/dts arrays (presentation order via argsort) without decoding."""
    import av

    with av.open(str(path)) as inp:
        stream = inp.streams.video[0]
        ctx = stream.codec_context
        pts, dts, key = [], [], []
        for packet in inp.demux(stream):
            if not packet.size:
                continue
            pts.append(packet.pts if packet.pts is not None else -1)
            dts.append(packet.dts if packet.dts is not None else packet.pts)
            key.append(packet.is_keyframe)
        time_base = Fraction(stream.time_base or Fraction(1, 1))
        pix_fmt = ctx.format.name if ctx.format is not None else None
        # the codec's name ("av1"), not its decoder's ("libdav1d" decodes AV1 here)
        codec, width, height = ctx.codec.canonical_name, int(ctx.width or 0), int(ctx.height or 0)
    p = np.asarray(pts, dtype=np.int64)
    d = np.asarray([x if x is not None else -1 for x in dts], dtype=np.int64)
    order = np.argsort(p, kind="stable")
    uniform = bool(len(p)) and bool((p >= 0).all())
    if uniform and len(p) > 1:
        steps = np.diff(p[order])
        step = int(steps[0])
        uniform = (
            step > 0 and bool((steps == step).all()) and bool(((d - p.min()) % step == 0).all())
        )
    rank = np.empty(len(p), dtype=np.int64)
    rank[order] = np.arange(len(p))
    keyframes = np.sort(rank[np.asarray(key, dtype=bool)]) if len(p) else np.zeros(0, np.int64)
    offset = int(p.min()) if len(p) else 0
    step = int(np.diff(np.sort(p))[0]) if uniform and len(p) > 1 else 1
    timed = bool(len(p)) and bool((p >= 0).all()) and len(np.unique(p)) == len(p)
    keys = np.asarray(key, dtype=bool)
    info = SourceVideo(
        codec, pix_fmt, width, height, len(p), uniform, keyframes, offset, step,
        *((rank, keys, p[order]) if timed else ()),
    )  # fmt: skip
    return info, p, d, time_base


def inspect_video(path: Path) -> SourceVideo:
    """`SourceVideo` of ``path`` (demuxes every packet; decodes nothing)."""
    return _timing(path)[0]


def histogram_stats(histogram: np.ndarray, images: int) -> dict[str, np.ndarray]:
    """min, max, mean, std, q01..q99 per channel of (3, 256) counts, scaled to [0, 1]."""
    values = np.arange(256, dtype=np.float64) / 255.0
    total = histogram.sum(axis=1).astype(np.float64)
    if not (total > 0).all():
        raise ValueError("no pixels sampled for the camera statistics")
    mean = (histogram * values).sum(axis=1) / total
    var = (histogram * (values[None, :] - mean[:, None]) ** 2).sum(axis=1) / total
    nonzero = histogram > 0
    lo = np.argmax(nonzero, axis=1)
    hi = 255 - np.argmax(nonzero[:, ::-1], axis=1)
    cdf = np.cumsum(histogram, axis=1) / total[:, None]
    out = {
        "min": values[lo],
        "max": values[hi],
        "mean": mean,
        "std": np.sqrt(var),
    }
    for q in QUANTILES:
        # the smallest value whose cumulative share reaches q (inverted CDF)
        out[quantile_name(q)] = values[np.argmax(cdf >= q - 1e-12, axis=1)]
    shaped = {k: v.reshape(3, 1, 1) for k, v in out.items()}
    shaped["count"] = np.array([images], dtype=np.int64)
    return shaped


QUANTILES = (0.01, 0.10, 0.50, 0.90, 0.99)


def quantile_name(q: float) -> str:
    """LeRobot's name of a quantile statistic: 0.01 -> ``q01``."""
    return f"q{round(q * 100):02d}"


def remux(src: Path, dst: Path, fps: int, source: SourceVideo | None = None) -> VideoResult:
    """Copy the packets of ``src`` into the mp4 ``dst``; frame ``k`` at ``k / fps``.

    ``source`` is `inspect_video` of ``src`` when the caller has it already. A short
    video's camera statistics come from the sample a decode of the same file left in this
    process (`camera_sample.shared`, EgoSmith's) when it is the sample taken here; then
    nothing is decoded.

    Raises:
        ValueError: ``src`` is not remuxable (see `SourceVideo.remuxable`).
    """
    import av.video.reformatter

    info = source if source is not None else inspect_video(src)
    if not info.remuxable:
        raise ValueError(
            f"{src}: not remuxable ({info.codec}, {info.pix_fmt}, uniform={info.uniform})"
        )
    offset, step = info.pts_offset, info.pts_step
    # Short videos: decode every frame and sample evenly. Long ones: decode only a
    # sample of keyframes (no other frame depends on them), so the copy stays cheap.
    decode_all = info.frames <= SHORT_VIDEO_FRAMES
    picks = sample_indices(info.frames if decode_all else len(info.keyframes))
    sampled = set((picks if decode_all else info.keyframes[picks]).tolist())
    known = _shared_sample(src, info, picks) if decode_all else None
    histogram = np.zeros((3, 256), dtype=np.int64) if known is None else known.histogram.copy()
    images = 0 if known is None else known.images
    out_tb = Fraction(1, fps)
    reformatter = av.video.reformatter.VideoReformatter()

    def take(frame: av.VideoFrame) -> None:
        nonlocal histogram, images
        # short videos: frame k (its pts) when sampled; long ones: every keyframe decoded
        if decode_all and frame.pts is None:
            raise ValueError(f"{src}: decoded a frame without a timestamp")
        if not decode_all or (int(frame.pts or 0) - offset) // step in sampled:
            histogram += frame_histogram(frame, reformatter)
            images += 1

    with av.open(str(src)) as inp, av.open(str(dst), "w", format="mp4", options=MUX_OPTIONS) as out:
        ist = inp.streams.video[0]
        ctx = ist.codec_context
        if not decode_all:
            ctx.skip_frame = "NONKEY"
        # a stream copy needs no encoder; a decoder-only codec object (libdav1d for AV1)
        # is taken over from the source, the others as before (same output bytes)
        by_decoder = ctx.codec.name != info.codec
        ost = out.add_stream_from_template(ist, opaque=by_decoder or None)
        ost.time_base = out_tb
        for packet in inp.demux(ist):
            if not packet.size:
                continue
            assert packet.pts is not None
            index = (packet.pts - offset) // step
            if decode_all and known is None:
                # a frame no other frame refers to is decoded only when it is sampled:
                # the others decode exactly as before (about 30 % fewer frames decoded)
                ctx.skip_frame = "DEFAULT" if index in sampled else "NONREF"
                decoded = ctx.decode(packet)
            elif not decode_all and index in sampled and packet.is_keyframe:
                decoded = ctx.decode(packet)
            else:
                decoded = []
            for frame in decoded:
                take(frame)
            dts = packet.dts if packet.dts is not None else packet.pts
            _mux_copied(out, ost, packet, index, (dts - offset) // step, out_tb)
        if known is None:
            for frame in ctx.decode(None):
                take(frame)
    return VideoResult(info.frames, True, PixelStats(histogram, images))


def _shared_sample(src: Path, info: SourceVideo, picks: np.ndarray) -> SampledFrames | None:
    """The sample another decode of ``src`` left in this process (`camera_sample.shared`),
    if its frame count and sampled frames' presentation times are those of ``picks``
    (presentation indices) in ``info``; else None (the remux decodes)."""
    found = camera_sample.shared(src)
    if found is None or len(info.pts) != info.frames:
        return None
    return found if found.matches(info.frames, info.pts[picks]) else None


def _mux_copied(
    out: av.container.OutputContainer,
    ost: av.video.stream.VideoStream,
    packet: av.Packet,
    pts: int,
    dts: int,
    time_base: Fraction,
) -> None:
    """Mux a copied ``packet`` into ``ost`` as frame ``pts`` (decoded at ``dts``), one
    frame long, both in ``time_base`` (1 / fps)."""
    packet.pts, packet.dts = pts, dts
    packet.duration = 1
    packet.time_base = time_base
    packet.stream = ost
    out.mux(packet)


def add_encoder_stream(
    out: av.container.OutputContainer, fps: int, width: int, height: int, threads: int = 0
) -> av.video.stream.VideoStream:
    """An `ENCODER` stream (H.264 yuv420p, frame ``k`` at ``k / fps``) in ``out``.

    ``threads``: the encoder's threads (0: as many as x264 picks for the machine; 1: it
    encodes on the calling thread only). The bitstream is the same either way.
    """
    ost = out.add_stream(ENCODER["codec"], rate=fps)
    ost.width, ost.height, ost.pix_fmt = width, height, PIX_FMT
    ost.time_base = Fraction(1, fps)
    ost.options = dict(ENCODER["options"])
    ost.thread_type = ENCODER["thread_type"]
    ost.thread_count = threads
    return ost


def encode_frame(
    out: av.container.OutputContainer,
    ost: av.video.stream.VideoStream,
    frame: av.VideoFrame,
    k: int,
    fps: int,
) -> None:
    """Encode ``frame`` as frame ``k`` of ``ost`` (at ``k / fps``) and mux its packets."""
    import av

    frame.pts = k
    frame.time_base = Fraction(1, fps)
    frame.pict_type = av.video.frame.PictureType.NONE  # the encoder picks the frame types
    out.mux(ost.encode(frame))


def needed_packets(source: SourceVideo, frame_for_row: np.ndarray) -> np.ndarray | None:
    """(P,) bool per packet in decode order: whether a row's frame needs it decoded.

    A group of pictures (a keyframe up to the next one, in decode order) none of whose
    frames is a row's is skipped, unless the next group has a row's frame among its
    leading pictures (shown before its keyframe: an open GOP's B-frames that refer to
    this group). None when the source's packets lack presentation times (then everything
    is decoded).
    """
    ranks, keys = source.packet_frames, source.packet_keys
    if len(ranks) == 0 or len(ranks) != source.frames:
        return None
    rows = np.asarray(frame_for_row, dtype=np.int64)
    wanted = np.zeros(source.frames, dtype=bool)
    wanted[rows[(rows >= 0) & (rows < source.frames)]] = True
    group = np.cumsum(keys)  # group 0: packets before the first keyframe (always decoded)
    groups = int(group[-1]) + 1
    used = wanted[ranks]
    needed = np.bincount(group, weights=used, minlength=groups) > 0
    needed[0] = True
    key_rank = ranks[np.minimum(np.searchsorted(group, np.arange(groups)), len(ranks) - 1)]
    leading = used & (ranks < key_rank[group])
    needed[:-1] |= np.bincount(group, weights=leading, minlength=groups)[1:] > 0
    return needed[group]


def _decoded(
    src: Path, source: SourceVideo | None, rows: np.ndarray
) -> Iterator[tuple[int, av.VideoFrame]]:
    """(presentation index, frame) of the source frames the rows need, in order."""
    import av

    needed = needed_packets(source, rows) if source is not None else None
    with av.open(str(src)) as inp:
        stream = inp.streams.video[0]
        stream.thread_count = 1  # `reencode` gives each decoder a thread of its own
        if needed is None or source is None:
            yield from enumerate(inp.decode(stream))
            return
        pts = source.pts

        def indexed(frames: list[av.VideoFrame]) -> Iterator[tuple[int, av.VideoFrame]]:
            for frame in frames:
                index = int(np.searchsorted(pts, frame.pts)) if frame.pts is not None else -1
                if not 0 <= index < len(pts) or pts[index] != frame.pts:
                    raise ValueError(f"{src}: decoded a frame at pts {frame.pts} no packet has")
                yield index, frame

        packet = 0
        for item in inp.demux(stream):
            if not item.size:
                continue
            packet += 1
            if needed[packet - 1]:
                yield from indexed(stream.codec_context.decode(item))
            elif packet > 1 and not needed[packet - 2]:
                continue
            else:  # first skipped packet: drain what the decoder still holds
                yield from indexed(stream.codec_context.decode(None))
                stream.codec_context.flush_buffers()
        yield from indexed(stream.codec_context.decode(None))


def _row_frames(
    src: Path, rows: np.ndarray, source: SourceVideo | None, sampled: set[int]
) -> Iterator[tuple[int, av.VideoFrame, np.ndarray | None]]:
    """(row, yuv420p frame, RGB histogram of the sampled rows) for every row, in order."""
    import av.video.reformatter

    frames = _decoded(src, source, rows)
    reformatter = av.video.reformatter.VideoReformatter()
    current: av.VideoFrame | None = None
    position = -1
    for row, wanted in enumerate(rows.tolist()):
        while position < wanted:
            item = next(frames, None)
            if item is None:
                raise ValueError(f"{src}: has {position + 1} frames, row {row} needs {wanted}")
            position, decoded = item
            current = (
                decoded if decoded.format.name == PIX_FMT else decoded.reformat(format=PIX_FMT)
            )
        if position != wanted or current is None:
            raise ValueError(f"{src}: frame {wanted} of row {row} was not decoded")
        yield row, current, frame_histogram(current, reformatter) if row in sampled else None


def _ahead(items: Iterator[Any], depth: int) -> Iterator[Any]:
    """The items of ``items``, produced by a background thread up to ``depth`` ahead."""
    buffer: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()
    done = object()

    def produce() -> None:
        try:
            for item in items:
                while not stop.is_set():
                    try:
                        buffer.put((None, item), timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
            buffer.put((None, done))
        except BaseException as error:  # handed to the consumer
            buffer.put((error, None))

    thread = threading.Thread(target=produce, name="lerobot-video-decode", daemon=True)
    thread.start()
    try:
        while True:
            error, item = buffer.get()
            if error is not None:
                raise error
            if item is done:
                return
            yield item
    finally:
        stop.set()
        thread.join()


def available_cores() -> int:
    """CPU cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


class InlineExecutor(Executor):
    """Runs each task in the calling thread as it is submitted; its futures are done (a
    task's exception is kept in its future, as a pool's)."""

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except Exception as exc:
            future.set_exception(exc)
        return future


def task_pool(workers: int, prefix: str) -> Executor:
    """``workers`` threads named ``prefix``, or an `InlineExecutor` when this process may
    run on one core: there threads only add hand-offs (starting one and waking it cost
    about a millisecond of a short export)."""
    if available_cores() > 1:
        return ThreadPoolExecutor(max_workers=workers, thread_name_prefix=prefix)
    return InlineExecutor()


def part_starts(rows: np.ndarray, source: SourceVideo | None, parts: int) -> list[int]:
    """First row of each part when ``rows`` are re-encoded in up to ``parts`` parts.

    Parts have about equal numbers of rows, at least `MIN_PART_ROWS`. A boundary moves,
    within an eighth of a part, to the nearest cut (a row that skips source frames: the
    part before stops decoding there, the part after starts at the cut's group of
    pictures, so the split decodes nothing twice), else to the nearest row that opens a
    source group of pictures, and then to an even row: with GOP 2 every part then starts
    at a frame the whole would also make a keyframe.
    """
    n = len(rows)
    parts = max(1, min(parts, MAX_PARTS, n // MIN_PART_ROWS))
    if parts == 1:
        return [0]
    ideal = (np.arange(1, parts) * n) // parts
    reach = n // (8 * parts)
    starts = ideal.copy()
    placed = np.zeros(len(ideal), dtype=bool)
    first_use = np.flatnonzero(np.diff(rows, prepend=-1) != 0)
    keyframes = source.keyframes if source is not None else np.zeros(0, np.int64)
    for candidates in (
        np.flatnonzero(np.diff(rows) > 1) + 1,
        first_use[np.isin(rows[first_use], keyframes)],
    ):
        if not len(candidates):
            continue
        at = np.searchsorted(candidates, ideal)
        before = candidates[np.clip(at - 1, 0, len(candidates) - 1)]
        after = candidates[np.clip(at, 0, len(candidates) - 1)]
        nearest = np.where(np.abs(after - ideal) < np.abs(before - ideal), after, before)
        take = ~placed & (np.abs(nearest - ideal) <= reach)
        starts[take], placed = nearest[take], placed | take
    starts = starts + starts % 2
    return [0, *sorted({int(x) for x in starts if 0 < x < n})]


def _encode_rows(
    frames: Iterator[tuple[int, av.VideoFrame, np.ndarray | None]],
    out: av.container.OutputContainer,
    ost: av.video.stream.VideoStream,
    first: int,
    fps: int,
) -> tuple[np.ndarray, int]:
    """Encode ``frames`` (`_row_frames` of a part) as frames ``first + row``; flush.

    Returns the summed RGB histogram of the sampled rows and their number.
    """
    histogram = np.zeros((3, 256), dtype=np.int64)
    images = 0
    for row, frame, counts in frames:
        if counts is not None:
            histogram += counts
            images += 1
        encode_frame(out, ost, frame, first + row, fps)
    out.mux(ost.encode(None))
    return histogram, images


def _encode_part(
    src: Path,
    rows: np.ndarray,
    source: SourceVideo | None,
    sampled: set[int],
    first: int,
    fps: int,
    size: tuple[int, int],
    path: Path,
) -> tuple[np.ndarray, int, bytes]:
    """Encode a later part into the NUT file ``path`` (it keeps packets as the encoder
    made them); its histogram, image count and the encoder's global header."""
    import av

    with av.open(str(path), "w", format="nut") as part:
        stream = add_encoder_stream(part, fps, *size, threads=1)
        histogram, images = _encode_rows(
            _row_frames(src, rows, source, sampled), part, stream, first, fps
        )
        return histogram, images, bytes(stream.codec_context.extradata or b"")


def _append_part(
    out: av.container.OutputContainer,
    ost: av.video.stream.VideoStream,
    path: Path,
    first: int,
    count: int,
    fps: int,
) -> None:
    """Copy the packets of the part in ``path`` (frames ``first`` .. ``first + count - 1``)
    into ``ost``, frame ``k`` at ``k / fps``."""
    import av

    time_base = Fraction(1, fps)
    shown = []
    with av.open(str(path), format="nut") as part:
        stream = part.streams.video[0]
        for packet in part.demux(stream):
            if not packet.size:
                continue
            assert packet.pts is not None and packet.time_base is not None
            scale = packet.time_base * fps
            dts = packet.dts if packet.dts is not None else packet.pts
            shown.append(round(packet.pts * scale))
            _mux_copied(out, ost, packet, shown[-1], round(dts * scale), time_base)
    if sorted(shown) != list(range(first, first + count)):
        raise RuntimeError(f"{path}: holds frames {shown[:3]}..., not {first}..{first + count - 1}")


def reencode(
    src: Path,
    dst: Path,
    fps: int,
    frame_for_row: np.ndarray,
    source: SourceVideo | None = None,
    parts: int | None = None,
) -> VideoResult:
    """Write row ``k`` of the mp4 ``dst`` from source frame ``frame_for_row[k]``, re-encoded.

    Args:
        src: source video (any codec PyAV decodes).
        dst: mp4 to write (H.264 yuv420p, `ENCODER`).
        fps: output frame rate; frame ``k`` at ``k / fps``.
        frame_for_row: (N,) int64 presentation index of the source frame of each row,
            non-decreasing (rows repeat or skip source frames, never go back).
        source: `inspect_video` of ``src`` when the caller has it: groups of pictures
            no row uses are then not decoded, and parts start at the source's keyframes.
        parts: encode in up to this many parts at once (default: one per available core;
            see `part_starts`). Each part's scratch file sits beside ``dst`` (named
            ``.<dst name>.part-<i>.nut``) and is removed before this returns.

    Raises:
        ValueError: ``frame_for_row`` goes back, or names a frame the source lacks.
    """
    import av

    rows = np.asarray(frame_for_row, dtype=np.int64)
    if len(rows) and (np.diff(rows) < 0).any():
        raise ValueError(f"{src}: rows must take source frames in order")
    sampled = set(sample_indices(len(rows)).tolist())
    with av.open(str(src)) as probe:
        ctx = probe.streams.video[0].codec_context
        size = (int(ctx.width), int(ctx.height))
    starts = part_starts(rows, source, available_cores() if parts is None else parts)
    bounds = list(zip(starts, [*starts[1:], len(rows)], strict=True))
    scratch = [dst.with_name(f".{dst.name}.part-{i}.nut") for i in range(1, len(bounds))]
    try:
        with av.open(str(dst), "w", format="mp4", options=MUX_OPTIONS) as out:
            ost = add_encoder_stream(out, fps, *size, threads=1)
            if len(bounds) == 1:
                frames = _ahead(_row_frames(src, rows, source, sampled), DECODE_AHEAD)
                histogram, images = _encode_rows(frames, out, ost, 0, fps)
            else:
                histogram, images = _encode_in_parts(
                    src, rows, source, sampled, bounds, scratch, out, ost, fps, size
                )
    finally:
        for path in scratch:
            path.unlink(missing_ok=True)
    return VideoResult(len(rows), False, PixelStats(histogram, images))


def _encode_in_parts(
    src: Path,
    rows: np.ndarray,
    source: SourceVideo | None,
    sampled: set[int],
    bounds: list[tuple[int, int]],
    scratch: list[Path],
    out: av.container.OutputContainer,
    ost: av.video.stream.VideoStream,
    fps: int,
    size: tuple[int, int],
) -> tuple[np.ndarray, int]:
    """`reencode` with one thread per part: the first into ``ost``, the others into
    ``scratch`` files, whose packets are then appended in order."""

    def part_sample(a: int, b: int) -> set[int]:
        return {row - a for row in sampled if a <= row < b}

    (a0, b0), later = bounds[0], bounds[1:]
    with ThreadPoolExecutor(len(later), thread_name_prefix="lerobot-video-part") as pool:
        jobs = [
            pool.submit(_encode_part, src, rows[a:b], source, part_sample(a, b), a, fps, size, path)
            for (a, b), path in zip(later, scratch, strict=True)
        ]
        frames = _row_frames(src, rows[a0:b0], source, part_sample(a0, b0))
        histogram, images = _encode_rows(frames, out, ost, 0, fps)
        results = [job.result() for job in jobs]
    header = bytes(ost.codec_context.extradata or b"")
    for (a, b), path, (counts, sampled_images, part_header) in zip(
        later, scratch, results, strict=True
    ):
        if part_header != header:  # same settings and size: x264 writes the same SPS/PPS
            raise RuntimeError(f"{path}: encoded with other parameter sets than {ost}")
        _append_part(out, ost, path, a, b - a, fps)
        histogram += counts
        images += sampled_images
    return histogram, images


def encode_rgb(dst: Path, frames: Iterator[np.ndarray], fps: int, width: int, height: int) -> int:
    """Encode RGB frames (H, W, 3 uint8) to ``dst`` with `ENCODER`; the bare-encode baseline."""
    import av

    count = 0
    with av.open(str(dst), "w", format="mp4", options=MUX_OPTIONS) as out:
        ost = add_encoder_stream(out, fps, width, height)
        for rgb in frames:
            encode_frame(out, ost, av.VideoFrame.from_ndarray(rgb, format="rgb24"), count, fps)
            count += 1
        out.mux(ost.encode(None))
    return count


def video_info(path: Path) -> dict[str, Any]:
    """LeRobot's ``features.<camera>.info`` block, read from the written mp4."""
    import av

    with av.open(str(path)) as inp:
        stream = inp.streams.video[0]
        ctx = stream.codec_context
        rate = stream.base_rate or stream.average_rate or stream.guessed_rate
        return {
            "video.height": int(ctx.height),
            "video.width": int(ctx.width),
            "video.codec": ctx.codec.canonical_name,
            "video.pix_fmt": ctx.format.name if ctx.format is not None else PIX_FMT,
            "video.fps": round(float(rate)) if rate else 0,
            "video.channels": 3,
            "has_audio": False,
            "is_depth_map": False,
        }


def frame_times(path: Path) -> np.ndarray:
    """(T,) presentation time of every frame, seconds, in presentation order (no decoding)."""
    _, pts, _, time_base = _timing(path)
    return np.sort(pts).astype(np.float64) * float(time_base)
