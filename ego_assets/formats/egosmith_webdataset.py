"""EgoSmith WebDataset writer: one sample per head-camera frame, in ``.tar`` shards.

Sample ``<dataset>_ep<episode:06d>_f<frame:06d>`` has the members ``image.jpg`` (the
head-camera frame), ``lowdim.npy`` (float32 (116,)), ``mano.npy`` (float32 (2, K)),
``meta.json`` and, with ``export_depth``, ``depth.npy`` (float32 (H, W), metres).
Per-frame arrays come from `egosmith_lowdim`; offsets from `egosmith_constants`;
docs/formats/egosmith-webdataset.md describes the format for users.

Two layers of output:

* **episode folder** (`write_episode`): the samples of one capture in
  ``shard-000000.tar``... plus ``episode.json``, the folder's index, written last.
* **dataset folder** (`pack_dataset`): every exported episode re-packed into the final
  ``shard-000000.tar``... with a train/val split by episode and ``manifest.json``
  (shards, samples, episodes, SHA-256), written last.

Video is decoded with PyAV (FFmpeg's threads) and re-encoded with libjpeg-turbo
(simplejpeg) frame by frame: the decoder's 4:2:0 YUV planes go straight into the JPEG
encoder (no RGB round trip). Two worker threads (on two or more cores; on one, the
calling thread itself) turn decoded frames into finished tar bytes (JPEG, ``.npy`` rows
behind a header made once, meta, tar headers) while the next frames decode; the calling
thread only appends those bytes in order and hashes them, so memory stays at a few
frames whatever the episode length. For a video of up to 300 frames the workers also
count the sample of frames behind CERES's camera statistics and leave it for a CERES
export of the same video in this process (`camera_sample`), which then decodes nothing.
Folders are written to a temporary sibling and renamed into place, and each one's index
file is written last, so a killed export never leaves a folder that a reader would take
as finished.
"""

from __future__ import annotations

import io
import json
import os
import re
import threading
import zipfile
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from ego_assets.formats import camera_sample, egosmith_constants
from ego_assets.formats.egosmith_lowdim import EpisodeArrays, HeadCamera, episode_arrays
from ego_assets.formats.egosmith_tar import ShardWriter, tar_sample
from ego_assets.formats.lerobot_video import available_cores
from ego_assets.progress import WRITE_TASK, report
from ego_assets.trajectory.model import MediaRef, Trajectory

if TYPE_CHECKING:
    import av  # PyAV and simplejpeg are imported where used (a code location loads neither)

FORMAT = "egosmith-webdataset"
WRITER_VERSION = "egosmith-1"
EPISODE_FILE = "episode.json"
MANIFEST_FILE = "manifest.json"
DEFAULT_DATASET = "ego_assets"
DEFAULT_SHARD_BYTES = 256 * 2**20
DEFAULT_JPEG_QUALITY = 90
_DATASET_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
_KEY_PATTERN = re.compile(r"(?P<dataset>[A-Za-z0-9][A-Za-z0-9_-]*)_ep(?P<ep>\d{6})_f(?P<f>\d{6})")
# libx264 / most cameras: BT.601 (or unspecified) limited-range 4:2:0. JPEG (JFIF) wants
# full range: Y 16..235 and Cb/Cr 16..240 are stretched to 0..255 in 8.8 fixed point,
# ``((clip(v, lo, hi) - lo) * mul + add) >> 8`` on uint16 (a few numpy passes; numpy's
# look-up tables are slower), within one level of the exact ``(v - 16) * 255 / 219`` and
# ``(v - 128) * 255 / 224 + 128`` (tested).
LUMA_STRETCH = (16, 235, 298, 132)  # lo, hi, mul, add
CHROMA_STRETCH = (16, 240, 291, 255)
_PLANAR_FORMATS = {"yuv420p": False, "yuvj420p": True}  # name -> already full range
_BT601 = {2, 5, 6}  # AVColorSpace: unspecified, BT470BG, SMPTE170M
_RANGE_JPEG = 2  # AVColorRange: full
# meta.json fields of one frame (`_EpisodeSamples.tar_bytes`); the others are the episode's
_FRAME_META = (
    "presence",
    "frame_index",
    "sample_index",
    "timestamp_ns",
    "extrinsic_valid",
    "last_frame",
)
ENCODE_WORKERS = min(2, os.cpu_count() or 1)
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class EgoSmithOptions:
    """What an export writes.

    Attributes:
        dataset_name: prefix of every sample key; empty: the capture's ``dataset_name``,
            else ``"ego_assets"``. Letters, digits, ``_`` and ``-`` only.
        shard_bytes: a shard is closed once it reaches this size (bytes).
        jpeg_quality: libjpeg quality 1-100.
        export_depth: write ``depth.npy`` per sample when the capture has a depth map.
        val_fraction: packing only: share of episodes put in the ``val`` split.
    """

    dataset_name: str = ""
    shard_bytes: int = DEFAULT_SHARD_BYTES
    jpeg_quality: int = DEFAULT_JPEG_QUALITY
    export_depth: bool = False
    val_fraction: float = 0.1

    def __post_init__(self) -> None:
        if self.dataset_name and not _DATASET_PATTERN.fullmatch(self.dataset_name):
            raise ValueError(f"dataset_name {self.dataset_name!r}: use [A-Za-z0-9_-], no dots")
        if self.shard_bytes <= 0 or not 1 <= self.jpeg_quality <= 100:
            raise ValueError("shard_bytes must be > 0 and jpeg_quality in 1..100")
        if not 0.0 <= self.val_fraction < 1.0:
            raise ValueError(f"val_fraction {self.val_fraction!r} must be in [0, 1)")

    def version(self) -> str:
        """The options that change an episode's bytes, as text (part of its data version)."""
        return (
            f"{self.dataset_name or '-'}/{self.shard_bytes}/q{self.jpeg_quality}/"
            f"depth{int(self.export_depth)}"
        )


def dataset_name_for(trajectory: Trajectory, options: EgoSmithOptions) -> str:
    """Key prefix of an episode's samples (see `EgoSmithOptions.dataset_name`)."""
    name = options.dataset_name or trajectory.info.dataset_name or DEFAULT_DATASET
    if not _DATASET_PATTERN.fullmatch(name):
        raise ValueError(
            f"capture {trajectory.info.capture_id!r}: dataset_name {name!r} cannot prefix "
            "a sample key (use [A-Za-z0-9_-], no dots); set EgoSmithOptions.dataset_name"
        )
    return name


def sample_key(dataset: str, episode: int, frame: int) -> str:
    """``<dataset>_ep<episode:06d>_f<frame:06d>`` (both numbers 0..999999)."""
    if (
        not 0 <= episode <= egosmith_constants.MAX_EPISODE
        or not 0 <= frame <= egosmith_constants.MAX_FRAME
    ):
        raise ValueError(f"episode {episode} / frame {frame} do not fit six digits")
    return egosmith_constants.KEY_PATTERN.format(dataset=dataset, episode=episode, frame=frame)


def parse_key(key: str) -> tuple[str, int, int]:
    """(dataset, episode, frame) of a sample key; ValueError if it is not one."""
    match = _KEY_PATTERN.fullmatch(key)
    if match is None:
        raise ValueError(f"{key!r} is not an EgoSmith sample key <dataset>_epNNNNNN_fNNNNNN")
    return match["dataset"], int(match["ep"]), int(match["f"])


def npy_bytes(array: np.ndarray) -> bytes:
    """``.npy`` file bytes of ``array`` (what ``numpy.load`` reads)."""
    buf = io.BytesIO()
    np.lib.format.write_array(buf, np.ascontiguousarray(array), allow_pickle=False)
    return buf.getvalue()


def npy_header(array: np.ndarray) -> bytes:
    """The ``.npy`` header of ``array``: ``npy_header(a) + a.tobytes()`` is `npy_bytes` (a)."""
    return npy_bytes(array)[: -array.nbytes or None]


# ---------------------------------------------------------------------------------------
# pixels


def full_range(
    plane: np.ndarray,
    stretch: tuple[int, int, int, int] = LUMA_STRETCH,
    out: np.ndarray | None = None,
    work: np.ndarray | None = None,
) -> np.ndarray:
    """A limited-range 8-bit plane stretched to full range (C-contiguous uint8).

    ``stretch`` is ``(lo, hi, mul, add)``: ``LUMA_STRETCH`` for luma, ``CHROMA_STRETCH`` for
    chroma. ``out`` (uint8) and ``work`` (uint16), C-contiguous arrays of the plane's
    shape, are filled instead of new arrays when given. Every step is a numpy ufunc on
    the whole plane (they release the GIL).
    """
    lo, hi, _, _ = stretch
    out = np.clip(plane, np.uint8(lo), np.uint8(hi), out=out)
    if work is None:
        work = np.empty(out.shape, dtype=np.uint16)
    _stretch_clipped(out, work, ((..., stretch),))
    return out


def full_range_420(
    planes: tuple[np.ndarray, np.ndarray, np.ndarray],
    out: tuple[np.ndarray, np.ndarray, np.ndarray],
    buffer: np.ndarray,
    work: np.ndarray,
) -> None:
    """`full_range` of the Y, U and V planes of a limited-range 4:2:0 frame into ``out``:
    C-contiguous views of ``buffer`` (uint8: Y, then U, then V), ``work`` (uint16, as
    long) the room for the arithmetic. The same values as three `full_range` calls in
    about half the numpy calls (U and V share theirs): most of a small frame's cost is
    the calls."""
    for plane, view, (lo, hi, _, _) in zip(
        planes, out, (LUMA_STRETCH, CHROMA_STRETCH, CHROMA_STRETCH), strict=True
    ):
        np.clip(plane, np.uint8(lo), np.uint8(hi), out=view)
    luma = planes[0].size
    parts = ((slice(0, luma), LUMA_STRETCH), (slice(luma, None), CHROMA_STRETCH))
    _stretch_clipped(buffer, work, parts)


def _stretch_clipped(
    levels: np.ndarray, work: np.ndarray, parts: tuple[tuple[Any, tuple[int, ...]], ...]
) -> None:
    """Clipped limited-range ``levels`` (uint8) stretched to full range in place, each
    ``(index, stretch)`` of ``parts`` with its own ``stretch``; ``work``: uint16, of the
    shape of ``levels``. ``((v - lo) * mul + add) >> 8`` as ``v * mul + (add - lo * mul)``
    modulo 2**16 (the true value fits in 16 bits, so the wrapped products and sums land on
    it exactly: one pass fewer than subtracting lo first), in numpy scalars (Python ints
    make numpy check their range on every call)."""
    np.copyto(work, levels)  # a plain cast: numpy's mixed-type multiply is 4x slower
    for index, (lo, _, mul, add) in parts:
        work[index] *= np.uint16(mul)
        work[index] += np.uint16((add - lo * mul) % 2**16)
    work >>= np.uint16(8)
    np.copyto(levels, work, casting="unsafe")


_SCRATCH = threading.local()


def _scratch(h: int, w: int) -> tuple[np.ndarray, np.ndarray]:
    """This thread's buffers for one (h, w) 4:2:0 frame: uint8 Y+U+V, uint16 as long.

    Reused frame after frame: fresh multi-megabyte arrays per frame cost the kernel a
    zeroed page per 4 KiB (and glibc hands them back each time), more than the stretch.
    """
    if getattr(_SCRATCH, "size", None) != (h, w):
        _SCRATCH.size = (h, w)
        _SCRATCH.planes = np.empty(h * w * 3 // 2, dtype=np.uint8)
        _SCRATCH.work = np.empty(h * w * 3 // 2, dtype=np.uint16)
    return _SCRATCH.planes, _SCRATCH.work


def _plane(plane: av.video.plane.VideoPlane) -> np.ndarray:
    """A decoded frame's plane as a (height, width) uint8 view (no copy): rows
    ``line_size`` bytes apart in the decoder's buffer."""
    buffer = memoryview(plane)
    return np.ndarray((plane.height, plane.width), np.uint8, buffer, 0, (plane.line_size, 1))


def encode_jpeg(frame: av.VideoFrame, quality: int) -> bytes:
    """JPEG bytes of one decoded video frame (4:2:0, full-range BT.601 as JFIF expects).

    4:2:0 BT.601 frames of even size go to the encoder as YUV planes, read in place from
    the decoder's buffers and range-stretched (when limited) into this thread's scratch
    buffers; anything else goes through RGB.
    """
    import simplejpeg

    name, h, w = frame.format.name, frame.height, frame.width
    if name in _PLANAR_FORMATS and frame.colorspace in _BT601 and h % 2 == 0 and w % 2 == 0:
        planes, work = _scratch(h, w)
        luma, chroma = h * w, (h // 2) * (w // 2)
        sources = frame.planes  # PyAV builds every plane object anew on each access
        src = (_plane(sources[0]), _plane(sources[1]), _plane(sources[2]))
        out = (
            planes[:luma].reshape(h, w),
            planes[luma : luma + chroma].reshape(h // 2, w // 2),
            planes[luma + chroma :].reshape(h // 2, w // 2),
        )
        if not _PLANAR_FORMATS[name] and frame.color_range != _RANGE_JPEG:
            full_range_420(src, out, planes, work)
        else:
            for plane, view in zip(src, out, strict=True):
                np.copyto(view, plane)
        return bytes(simplejpeg.encode_jpeg_yuv_planes(*out, quality=quality))
    rgb = frame.to_ndarray(format="rgb24")
    return bytes(simplejpeg.encode_jpeg(rgb, quality=quality, colorspace="RGB"))


def ordered_map(
    fn: Callable[..., T], items: Iterable[tuple[Any, ...]], workers: int | None = None
) -> Iterator[T]:
    """``fn(*item)`` for every item, run on ``workers`` threads, yielded in input order.

    At most ``4 * workers`` items are in flight, so memory stays bounded while the
    producer (e.g. the video decoder) runs ahead of the slowest worker. ``workers``
    defaults to `ENCODE_WORKERS`, at most one per core this process may run on; with
    one, ``fn`` runs in this thread (threads sharing one core only add hand-offs).
    """
    workers = min(ENCODE_WORKERS, available_cores()) if workers is None else workers
    if workers <= 1:
        yield from (fn(*item) for item in items)
        return
    with ThreadPoolExecutor(workers) as pool:
        pending: deque[Future[T]] = deque()
        for item in items:
            pending.append(pool.submit(fn, *item))
            if len(pending) >= 4 * workers:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()


@contextmanager
def decoded_frames(video: Path) -> Iterator[Iterator[av.VideoFrame]]:
    """The frames of the first video stream of ``video``, decoded on FFmpeg's threads."""
    import av

    with av.open(str(video)) as container:
        stream = container.streams.video[0]
        stream.thread_type = "AUTO"
        yield container.decode(stream)


def iter_depth_frames(npz: Path, unit: str) -> Iterator[np.ndarray]:
    """(H, W) float32 metres per frame of the first array of a ``depth.npz`` (streaming)."""
    scale = {"m": 1.0, "mm": 1e-3, "cm": 1e-2}.get(unit or "m")
    if scale is None:
        raise ValueError(f"{npz.name}: depth unit {unit!r} (known: m, cm, mm)")
    with zipfile.ZipFile(npz) as archive:
        member = next(n for n in archive.namelist() if n.endswith(".npy"))
        with archive.open(member) as fh:
            major, _ = np.lib.format.read_magic(fh)
            read_header = (
                np.lib.format.read_array_header_1_0
                if major == 1
                else np.lib.format.read_array_header_2_0
            )
            shape, fortran, dtype = read_header(fh)
            if fortran or len(shape) != 3:
                raise ValueError(f"{npz.name}: expected a C-order (T, H, W) array, got {shape}")
            size = int(shape[1] * shape[2] * dtype.itemsize)
            for _ in range(shape[0]):
                raw = fh.read(size)
                if len(raw) != size:
                    raise ValueError(f"{npz.name}: depth array ends early")
                plane = np.frombuffer(raw, dtype=dtype).reshape(shape[1], shape[2])
                yield (plane.astype(np.float64) * scale).astype(np.float32)


# ---------------------------------------------------------------------------------------
# one episode


@dataclass(frozen=True, slots=True)
class EpisodeSummary:
    """Content of ``episode.json``: what one episode folder holds (or why it is empty).

    ``status`` is ``"written"`` or ``"skipped"`` (with ``reason``); ``shards`` lists the
    folder's tar files with sample counts and SHA-256.
    """

    capture_id: str
    episode_index: int
    status: str
    data_version: str
    reason: str = ""
    dataset_name: str = ""
    clip_id: str = ""
    split: str = ""
    samples: int = 0
    first_frame: int = -1
    last_frame: int = -1
    camera: str = ""
    presence_counts: dict[str, int] = field(default_factory=dict)
    hands: dict[str, dict[str, str]] = field(default_factory=dict)
    mano: dict[str, Any] = field(default_factory=dict)
    depth: bool = False
    shards: list[dict[str, Any]] = field(default_factory=list)
    format: str = FORMAT
    writer_version: str = WRITER_VERSION

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str) -> EpisodeSummary:
        return cls(**json.loads(text))


def episode_meta(
    trajectory: Trajectory, dataset: str, episode_index: int, split: str, arrays: EpisodeArrays
) -> dict[str, Any]:
    """meta.json fields shared by every sample of an episode (per-frame ones are added)."""
    instructions = list(trajectory.annotations.instructions)
    left, right = arrays.hands
    return {
        "dataset_name": dataset,
        "clip_id": trajectory.info.source_capture_id or trajectory.info.capture_id,
        "episode_index": episode_index,
        "split": split,
        "instruction": instructions,
        "instruction_num": len(instructions),
        "language": instructions[-1] if instructions else "",
        "lowdim_schema": egosmith_constants.LOWDIM_SCHEMA,
        "wrist_translation_semantics": egosmith_constants.WRIST_TRANSLATION_SEMANTICS,
        "camera_extrinsic_convention": egosmith_constants.CAMERA_EXTRINSIC_CONVENTION,
        "capture_id": trajectory.info.capture_id,
        "source_kind": trajectory.info.source_kind,
        "language_code": trajectory.annotations.language,
        "wrist_rotation_source": {"left": left.rotation_source, "right": right.rotation_source},
        "fingertips_source": {"left": left.fingertips, "right": right.fingertips},
        "mano_source": arrays.mano_schema["source"],
    }


def meta_json(base: dict[str, Any], frame: dict[str, int | bool]) -> Callable[..., str]:
    """``json.dumps({**base, **frame}, sort_keys=True)`` as a function of the per-frame
    values (integers and booleans, passed by the names of ``frame``'s keys): the text
    around them is made once, from ``base`` and the keys alone."""
    slots = sorted(frame)
    items = sorted({**base, **frame}.items())
    texts, part = [], "{"
    for n, (key, value) in enumerate(items):
        part += ", " * (n > 0) + json.dumps(key) + ": "
        if key in frame:
            texts.append(part)
            part = ""
        else:
            part += json.dumps(value, sort_keys=True)
    texts.append(part + "}")

    def text(**values: int | bool) -> str:
        out = texts[0]
        for key, after in zip(slots, texts[1:], strict=True):
            value = values[key]
            out += ("true" if value else "false") if isinstance(value, bool) else str(value)
            out += after
        return out

    return text


@dataclass(frozen=True, slots=True)
class _EpisodeSamples:
    """Makes the tar bytes of an episode's samples, one decoded frame at a time.

    Everything but the pixels is prepared once per episode (keys, per-frame meta values as
    Python lists, the ``.npy`` headers of one lowdim / mano row), so that the per-frame
    work, run on the encode workers, is the JPEG plus a few byte joins.
    """

    keys: list[str]
    lowdim: np.ndarray
    mano: np.ndarray
    npy_headers: tuple[bytes, bytes]
    meta: Callable[..., str]  # meta.json text from the per-frame values (`meta_json`)
    per_frame: list[tuple[int, int, int, bool]]
    quality: int

    @classmethod
    def build(
        cls, keys: list[str], arrays: EpisodeArrays, base: dict[str, Any], quality: int
    ) -> _EpisodeSamples:
        lowdim = np.ascontiguousarray(arrays.lowdim, dtype=np.float32)
        mano = np.ascontiguousarray(arrays.mano, dtype=np.float32)
        columns = (arrays.presence, arrays.frame_index, arrays.timestamp_ns, arrays.extrinsic_valid)
        per_frame = list(zip(*(np.asarray(c).tolist() for c in columns), strict=True))
        return cls(
            keys,
            lowdim,
            mano,
            (npy_header(lowdim[0]), npy_header(mano[0])),
            meta_json(base, dict.fromkeys(_FRAME_META, 0)),
            per_frame,
            quality,
        )

    def tar_bytes(self, i: int, frame: av.VideoFrame, depth: np.ndarray | None) -> bytes:
        """`tar_sample` bytes of sample ``i`` (video frame ``frame``, optional depth map)."""
        presence, frame_index, timestamp_ns, extrinsic_valid = self.per_frame[i]
        meta = self.meta(
            presence=int(presence),
            frame_index=int(frame_index),
            sample_index=i,
            timestamp_ns=int(timestamp_ns),
            extrinsic_valid=bool(extrinsic_valid),
            last_frame=i == len(self.keys) - 1,
        )
        members = [
            ("image.jpg", encode_jpeg(frame, self.quality)),
            ("lowdim.npy", self.npy_headers[0] + self.lowdim[i].tobytes()),
            ("mano.npy", self.npy_headers[1] + self.mano[i].tobytes()),
            ("meta.json", meta.encode()),
        ]
        if depth is not None:
            members.append(("depth.npy", npy_bytes(depth)))
        return tar_sample(self.keys[i], members)


def _hand_sources(arrays: EpisodeArrays) -> dict[str, dict[str, str]]:
    """``episode.json``'s ``hands``: by stream (or side) its side and rotation and
    fingertip sources."""
    return {
        h.stream or side: {"side": side, "rotation": h.rotation_source, "fingertips": h.fingertips}
        for side, h in zip(egosmith_constants.HANDS, arrays.hands, strict=True)
    }


def write_episode(
    trajectory: Trajectory,
    camera: HeadCamera,
    video: Path,
    out: Path,
    *,
    episode_index: int,
    data_version: str,
    options: EgoSmithOptions,
    depth: tuple[Path, MediaRef] | None = None,
) -> EpisodeSummary:
    """Write the samples of one episode into the empty folder ``out`` (+ ``episode.json``).

    Args:
        trajectory: the canonical episode.
        camera: its head camera (`egosmith_lowdim.head_camera`).
        video: local path of the camera's video file.
        out: existing empty folder (a temporary one: the caller renames it into place).
        episode_index: the episode's stable dataset-wide number.
        data_version: recorded in ``episode.json`` (reuse decisions).
        options: export options.
        depth: local ``depth.npz`` path and its `MediaRef`, written when
            ``options.export_depth``.

    Raises:
        ValueError: the video's frame count differs from the frames stream (names the
            capture, the file and both counts).
    """
    dataset = dataset_name_for(trajectory, options)
    arrays = episode_arrays(trajectory, camera)
    split = trajectory.info.split
    base = episode_meta(trajectory, dataset, episode_index, split, arrays)
    n = len(arrays.frame_index)
    keys = [sample_key(dataset, episode_index, int(f)) for f in arrays.frame_index]
    use_depth = depth is not None and options.export_depth
    if use_depth:
        base["depth_schema"] = egosmith_constants.DEPTH_SCHEMA
        base["depth_encoding"] = egosmith_constants.DEPTH_ENCODING
    depth_frames = iter_depth_frames(depth[0], depth[1].unit) if use_depth and depth else None
    samples = _EpisodeSamples.build(keys, arrays, base, options.jpeg_quality)
    where = f"capture {trajectory.info.capture_id!r}, file {camera.media.path!r}"
    # the sample behind CERES's camera statistics, counted on the encode workers and left
    # for a CERES export of the same video in this process (`camera_sample`)
    sampler = camera_sample.FrameSampler(n, video)

    def work(frames: Iterator[av.VideoFrame]) -> Iterator[tuple[Any, ...]]:
        for i, frame in enumerate(frames):
            if i >= n:
                raise ValueError(
                    f"{where}: more video frames than the {n} rows of {camera.frames.name!r}"
                )
            yield i, frame, None if depth_frames is None else next(depth_frames)

    writer = ShardWriter(out, options.shard_bytes)
    count = 0
    try:
        with decoded_frames(video) as frames:
            for data in ordered_map(sampler.observing(samples.tar_bytes), work(frames)):
                report(WRITE_TASK, count, n)
                writer.write_sample(data)
                count += 1
    finally:
        shards = writer.close()
    if count != n:
        raise ValueError(
            f"{where}: {count} video frames decoded, {camera.frames.name!r} has {n} rows"
        )
    sampler.publish(count)
    summary = EpisodeSummary(
        capture_id=trajectory.info.capture_id,
        episode_index=episode_index,
        status="written",
        data_version=data_version,
        dataset_name=dataset,
        clip_id=str(base["clip_id"]),
        split=split,
        samples=count,
        first_frame=int(arrays.frame_index[0]),
        last_frame=int(arrays.frame_index[-1]),
        camera=camera.media.role,
        presence_counts={
            str(v): int(c)
            for v, c in zip(*np.unique(arrays.presence, return_counts=True), strict=True)
        },
        hands=_hand_sources(arrays),
        mano=dict(arrays.mano_schema),
        depth=use_depth,
        shards=[asdict(s) for s in shards],
    )
    (out / EPISODE_FILE).write_text(summary.to_json())
    return summary


def skipped_episode(capture_id: str, episode_index: int, data_version: str, reason: str) -> str:
    """``episode.json`` text of an episode that cannot be exported (e.g. no head camera)."""
    return EpisodeSummary(
        capture_id=capture_id,
        episode_index=episode_index,
        status="skipped",
        data_version=data_version,
        reason=reason,
    ).to_json()
