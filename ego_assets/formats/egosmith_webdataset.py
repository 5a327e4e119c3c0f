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

Video is decoded with PyAV and re-encoded with libjpeg-turbo (simplejpeg) frame by
frame: 4:2:0 YUV planes go straight into the JPEG encoder (no RGB round trip), so memory
stays at one frame whatever the episode length. Folders are written to a temporary
sibling and renamed into place, and each one's index file is written last, so a killed
export never leaves a folder that a reader would take as finished.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import tarfile
import zipfile
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, cast

import av
import numpy as np
import simplejpeg

from ego_assets.formats import egosmith_constants as C
from ego_assets.formats.egosmith_lowdim import EpisodeArrays, HeadCamera, episode_arrays
from ego_assets.progress import WRITE_TASK, report
from ego_assets.trajectory.model import MediaRef, Trajectory

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
# full range: these tables stretch Y 16..235 and Cb/Cr 16..240 to 0..255.
_Y_FULL = np.clip(np.round((np.arange(256) - 16) * 255 / 219), 0, 255).astype(np.uint8)
_C_FULL = np.clip(np.round((np.arange(256) - 128) * 255 / 224 + 128), 0, 255).astype(np.uint8)
_PLANAR_FORMATS = {"yuv420p": False, "yuvj420p": True}  # name -> already full range
_BT601 = {2, 5, 6}  # AVColorSpace: unspecified, BT470BG, SMPTE170M
ENCODE_WORKERS = min(2, os.cpu_count() or 1)


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
    if not 0 <= episode <= C.MAX_EPISODE or not 0 <= frame <= C.MAX_FRAME:
        raise ValueError(f"episode {episode} / frame {frame} do not fit six digits")
    return C.KEY_PATTERN.format(dataset=dataset, episode=episode, frame=frame)


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


# ---------------------------------------------------------------------------------------
# pixels


def _pair_table(table: np.ndarray) -> np.ndarray:
    """A 256-entry uint8 table applied to two pixels at once: 65536-entry uint16 table."""
    pair = np.arange(65536)
    native = table[pair & 255].astype(np.uint16) | (table[pair >> 8].astype(np.uint16) << 8)
    return native if np.little_endian else native.byteswap()


_Y_PAIRS = _pair_table(_Y_FULL)
_C_PAIRS = _pair_table(_C_FULL)


def encode_jpeg(frame: av.VideoFrame, quality: int) -> bytes:
    """JPEG bytes of one decoded video frame (4:2:0, full-range BT.601 as JFIF expects).

    4:2:0 BT.601 frames of even size go to the encoder as YUV planes (range-stretched
    when limited, two pixels per table look-up); anything else goes through RGB.
    """
    name, h, w = frame.format.name, frame.height, frame.width
    if name in _PLANAR_FORMATS and frame.colorspace in _BT601 and h % 2 == 0 and w % 2 == 0:
        flat = frame.to_ndarray().reshape(-1)  # Y (h * w), U, V (h/2 * w/2 each)
        luma, chroma = h * w, (h // 2) * (w // 2)
        if not _PLANAR_FORMATS[name] and frame.color_range != 2:  # 2 = AVCOL_RANGE_JPEG
            flat = np.concatenate(
                [
                    np.take(_Y_PAIRS, flat[:luma].view(np.uint16)).view(np.uint8),
                    np.take(_C_PAIRS, flat[luma:].view(np.uint16)).view(np.uint8),
                ]
            )
        y = flat[:luma].reshape(h, w)
        u = flat[luma : luma + chroma].reshape(h // 2, w // 2)
        v = flat[luma + chroma :].reshape(h // 2, w // 2)
        return bytes(simplejpeg.encode_jpeg_yuv_planes(y, u, v, quality=quality))
    rgb = frame.to_ndarray(format="rgb24")
    return bytes(simplejpeg.encode_jpeg(rgb, quality=quality, colorspace="RGB"))


def iter_jpeg_frames(video: Path, quality: int, workers: int = ENCODE_WORKERS) -> Iterator[bytes]:
    """JPEG bytes of every frame of the first video stream, in order (streaming).

    The calling thread decodes (FFmpeg frame threads); ``workers`` threads convert and
    encode (numpy and libjpeg-turbo release the GIL), at most ``2 * workers`` frames ahead.
    """
    with av.open(str(video)) as container, ThreadPoolExecutor(workers) as pool:
        stream = container.streams.video[0]
        stream.thread_type = "AUTO"
        pending: deque[Future[bytes]] = deque()
        for frame in container.decode(stream):
            pending.append(pool.submit(encode_jpeg, frame, quality))
            if len(pending) > 2 * workers:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()


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
# tar shards


@dataclass(frozen=True, slots=True)
class ShardInfo:
    """One written shard: file name, samples, size in bytes, SHA-256 of its bytes."""

    name: str
    samples: int
    bytes: int
    sha256: str


class _HashingFile:
    """Write-only file wrapper that hashes and counts what passes through."""

    def __init__(self, fh: BinaryIO) -> None:
        self._fh = fh
        self.sha = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes) -> int:
        self.sha.update(data)
        self.size += len(data)
        return self._fh.write(data)

    def tell(self) -> int:
        return self.size


class ShardWriter:
    """Writes samples into ``shard-NNNNNN.tar`` files of about ``shard_bytes`` each.

    Members are regular files named ``<key>.<ext>`` (no folders, no links), mode 0444,
    owner 0:0 and mtime 0, so the same samples always give the same bytes. A sample never
    straddles two shards; a shard is closed before a sample that would take it past
    ``shard_bytes`` (a single larger sample gets a shard of its own).
    """

    def __init__(self, folder: Path, shard_bytes: int, first: int = 0) -> None:
        self.folder = Path(folder)
        self.shard_bytes = shard_bytes
        self.next_index = first
        self.shards: list[ShardInfo] = []
        self._tar: tarfile.TarFile | None = None
        self._raw: BinaryIO | None = None
        self._hash: _HashingFile | None = None
        self._name = ""
        self._samples = 0

    def write(self, key: str, members: Sequence[tuple[str, bytes]]) -> None:
        """Append one sample (``members``: (extension, bytes) pairs)."""
        size = sum(512 + -(-len(data) // 512) * 512 for _, data in members)
        full = self._hash is not None and self._hash.size + size > self.shard_bytes
        if self._tar is not None and self._samples and full:
            self._close_shard()
        if self._tar is None:
            self._open_shard()
        assert self._tar is not None
        for ext, data in members:
            info = tarfile.TarInfo(f"{key}.{ext}")
            info.size = len(data)
            info.mode = 0o444
            info.mtime = 0
            self._tar.addfile(info, io.BytesIO(data))
        self._samples += 1

    def close(self) -> list[ShardInfo]:
        """Finish the open shard; return every shard written."""
        if self._tar is not None:
            self._close_shard()
        return list(self.shards)

    def _open_shard(self) -> None:
        self._name = C.SHARD_PATTERN.format(self.next_index)
        self.next_index += 1
        # both stay open until _close_shard
        self._raw = open(self.folder / self._name, "wb")  # noqa: SIM115
        self._hash = _HashingFile(self._raw)
        sink = cast(BinaryIO, self._hash)
        self._tar = tarfile.TarFile(fileobj=sink, mode="w", format=tarfile.USTAR_FORMAT)
        self._samples = 0

    def _close_shard(self) -> None:
        assert self._tar is not None and self._raw is not None and self._hash is not None
        self._tar.close()
        self._raw.close()
        info = ShardInfo(self._name, self._samples, self._hash.size, self._hash.sha.hexdigest())
        self.shards.append(info)
        self._tar = self._raw = self._hash = None


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
        "lowdim_schema": C.LOWDIM_SCHEMA,
        "wrist_translation_semantics": C.WRIST_TRANSLATION_SEMANTICS,
        "camera_extrinsic_convention": C.CAMERA_EXTRINSIC_CONVENTION,
        "capture_id": trajectory.info.capture_id,
        "source_kind": trajectory.info.source_kind,
        "language_code": trajectory.annotations.language,
        "wrist_rotation_source": {"left": left.rotation_source, "right": right.rotation_source},
        "fingertips_source": {"left": left.fingertips, "right": right.fingertips},
        "mano_source": arrays.mano_schema["source"],
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
        base["depth_schema"] = C.DEPTH_SCHEMA
        base["depth_encoding"] = C.DEPTH_ENCODING
    depth_frames = iter_depth_frames(depth[0], depth[1].unit) if use_depth and depth else None
    writer = ShardWriter(out, options.shard_bytes)
    count = 0
    try:
        for i, jpeg in enumerate(iter_jpeg_frames(video, options.jpeg_quality)):
            report(WRITE_TASK, i, n)
            if i >= n:
                raise ValueError(
                    f"capture {trajectory.info.capture_id!r}, file {camera.media.path!r}: "
                    f"more video frames than the {n} rows of {camera.frames.name!r}"
                )
            meta = {
                **base,
                "presence": int(arrays.presence[i]),
                "frame_index": int(arrays.frame_index[i]),
                "sample_index": i,
                "timestamp_ns": int(arrays.timestamp_ns[i]),
                "extrinsic_valid": bool(arrays.extrinsic_valid[i]),
                "last_frame": i == n - 1,
            }
            members = [
                ("image.jpg", jpeg),
                ("lowdim.npy", npy_bytes(arrays.lowdim[i])),
                ("mano.npy", npy_bytes(arrays.mano[i])),
                ("meta.json", json.dumps(meta, sort_keys=True).encode()),
            ]
            if depth_frames is not None:
                members.append(("depth.npy", npy_bytes(next(depth_frames))))
            writer.write(keys[i], members)
            count += 1
    finally:
        shards = writer.close()
    if count != n:
        raise ValueError(
            f"capture {trajectory.info.capture_id!r}, file {camera.media.path!r}: "
            f"{count} video frames decoded, {camera.frames.name!r} has {n} rows"
        )
    left, right = arrays.hands
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
        hands={
            h.stream or side: {
                "side": side,
                "rotation": h.rotation_source,
                "fingertips": h.fingertips,
            }
            for side, h in zip(C.HANDS, (left, right), strict=True)
        },
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
