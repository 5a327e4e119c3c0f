"""The video side of a CERES merge (`ceres_merge`): the shards' mp4s appended, by
stream copy, to the merged dataset's video files.

`merge_videos` takes one `VideoStep` an episode, in the merge's order, and needs nothing
the data side computes: it can run beside it, in a thread or in a process of its own
(the caller's ``video_runner``), which keeps PyAV's per-file opening and per-packet
Python off the interpreter that decodes and writes the rows. Frame ``k`` of a merged
file sits at ``k / fps``; a new file starts where a step says so (a release's part
break, the end of linked files), when the next episode's codec parameters differ, or
when the file would pass `VIDEO_FILES_SIZE_IN_MB`. Files of an earlier merge (a step's
``linked_from``) are hard-linked from it at the same place, not written. Every written
file is hashed (SHA-256, for the receipt) on a thread once it is closed.

Also the shard file lookup both sides share (`shard_file`).
"""

from __future__ import annotations

import os
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

from ego_assets.fileio import file_sha256, json_loads, link_or_copy
from ego_assets.formats.ceres_lerobot import (
    CAMERA_KEY,
    CHUNKS_SIZE,
    MB,
    METADATA_FILE,
    VIDEO_FILES_SIZE_IN_MB,
    VIDEO_PATH,
)
from ego_assets.formats.lerobot_video import MUX_OPTIONS


@dataclass(frozen=True, slots=True)
class VideoStep:
    """One episode of the merged video: its shard folder and frame count, whether a new
    video file starts before it, and the earlier merge its video file is linked from
    (None: the file is written)."""

    shard: Path
    frames: int
    new_file: bool = False
    linked_from: Path | None = None


@dataclass(frozen=True, slots=True)
class VideoPlace:
    """Where an episode's frames landed: video file (chunk, file) and first frame there."""

    chunk: int
    file: int
    start: int


def shard_file(shard: Path, template: str, episode: int, middle: str, suffix: str) -> Path:
    """A one-episode shard's file: at the path ``template`` gives for chunk 0 and file
    ``episode`` (its episode index), where the exporter writes it and its episode row
    points (one ``stat``); else the shard's one ``<middle>/*/*<suffix>`` (`_one`: two
    directory reads, or the error naming the shard)."""
    path = shard / template.format(video_key=CAMERA_KEY, chunk_index=0, file_index=episode)
    return path if path.is_file() else _one(shard, middle, suffix)


def shard_episode(shard: Path) -> int:
    """The episode index a shard's episode metadata gives."""
    return int(json_loads((shard / METADATA_FILE).read_bytes())["episode"]["index"])


def _one(folder: Path, middle: str, suffix: str) -> Path:
    """The one file ``folder/<middle>/*/*<suffix>`` (what a glob of that pattern finds:
    hidden names left out), listed with two directory reads of plain names, not a glob."""
    top = os.path.join(folder, middle)
    found = [
        os.path.join(top, sub, name)
        for sub in visible_names(top)
        for name in visible_names(os.path.join(top, sub))
        if name.endswith(suffix)
    ]
    if len(found) != 1:
        raise ValueError(f"shard {folder}: expected one {middle}/*/*{suffix}, found {len(found)}")
    return Path(found[0])


def visible_names(folder: str | Path) -> list[str]:
    """The names in ``folder`` but hidden ones (none when it is not a folder)."""
    try:
        return [name for name in os.listdir(folder) if name[0] != "."]
    except (FileNotFoundError, NotADirectoryError):
        return []


def advance(chunk: int, file: int) -> tuple[int, int]:
    """LeRobot's next (chunk, file) index."""
    return (chunk + 1, 0) if file >= CHUNKS_SIZE - 1 else (chunk, file + 1)


class FileHashes:
    """SHA-256 of files once they are closed, each on a thread of its own while the
    writer goes on (not read again after it): relative path below ``out`` -> digest."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="merge-hash")
        self.pending: dict[str, Future[str]] = {}

    def add(self, path: Path) -> None:
        self.pending[path.relative_to(self.out).as_posix()] = self.pool.submit(file_sha256, path)

    def result(self) -> dict[str, str]:
        """Every digest (waits for them)."""
        return {path: digest.result() for path, digest in self.pending.items()}

    def shutdown(self) -> None:
        self.pool.shutdown(wait=True)


@dataclass
class _VideoFile:
    """The mp4 being appended to, with the codec parameters it was opened with."""

    path: Path
    container: Any
    stream: Any
    params: tuple
    frames: int = 0
    bytes: int = 0


class _VideoFiles:
    """The current merged video file, its (chunk, file) index and the files' digests."""

    def __init__(self, out: Path, fps: int) -> None:
        self.out, self.fps = out, fps
        self.loc = (0, 0)
        self.current: _VideoFile | None = None
        self.linked_from: Path | None = None
        self.hashes = FileHashes(out)

    def append(self, inp: Any, size: int, frames: int) -> VideoPlace:
        """Append the open mp4 ``inp`` (``size`` bytes, ``frames`` frames) by stream copy."""
        ist = inp.streams.video[0]
        ctx = ist.codec_context
        pix_fmt = ctx.format.name if ctx.format is not None else None
        params = (ctx.name, ctx.width, ctx.height, pix_fmt, bytes(ctx.extradata or b""))
        current = self.current
        if current is not None and (
            current.params != params or current.bytes + size >= VIDEO_FILES_SIZE_IN_MB * MB
        ):
            self.new_file()
            current = None
        if current is None:
            current = self.current = self._open(ist, params)
        start = current.frames
        if current.container is not None:  # a linked file is not written
            tb = Fraction(ist.time_base or Fraction(1, self.fps))
            scale, den = tb.numerator * self.fps, tb.denominator
            out_tb = Fraction(1, self.fps)
            stream, mux = current.stream, current.container.mux
            for packet in inp.demux(ist):
                if not packet.size:
                    continue
                packet.pts = _frames(packet.pts, scale, den) + start
                packet.dts = _frames(packet.dts, scale, den) + start
                packet.duration = 1
                packet.time_base = out_tb
                packet.stream = stream
                mux(packet)
        current.frames += frames
        current.bytes += size
        return VideoPlace(*self.loc, start)

    def _open(self, ist: Any, params: tuple) -> _VideoFile:
        import av

        chunk, file = self.loc
        relative = VIDEO_PATH.format(video_key=CAMERA_KEY, chunk_index=chunk, file_index=file)
        path = self.out / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        if self.linked_from is not None:
            link_or_copy(self.linked_from / relative, path)
            return _VideoFile(path, None, None, params)
        container = av.open(str(path), "w", format="mp4", options=MUX_OPTIONS)
        stream = container.add_stream_from_template(ist)
        stream.time_base = Fraction(1, self.fps)
        return _VideoFile(path, container, stream, params)

    def new_file(self) -> None:
        """Close the current file: the next episode's video starts a new one."""
        if self.current is not None:
            if self.current.container is not None:
                self.current.container.close()
                self.hashes.add(self.current.path)
            self.current = None
            self.loc = advance(*self.loc)

    def close(self) -> None:
        """Close the current file (hashed too); the hashing thread ends once it is done."""
        try:
            if self.current is not None and self.current.container is not None:
                self.current.container.close()
                self.hashes.add(self.current.path)
        finally:
            self.current = None
            self.hashes.shutdown()


def merge_videos(
    out: Path, fps: int, steps: list[VideoStep]
) -> tuple[list[VideoPlace], dict[str, str]]:
    """Append each step's shard mp4 to the merged video files below ``out`` (module
    docstring): each step's `VideoPlace`, and relative path -> SHA-256 of every file
    written (linked ones are not)."""
    import av

    files = _VideoFiles(Path(out), fps)
    placed: list[VideoPlace] = []
    try:
        for step in steps:
            if step.new_file:
                files.new_file()
            files.linked_from = step.linked_from
            episode = shard_episode(step.shard)
            mp4 = shard_file(step.shard, VIDEO_PATH, episode, f"videos/{CAMERA_KEY}", ".mp4")
            size = mp4.stat().st_size
            with av.open(str(mp4), format="mp4") as inp:  # no container probing
                placed.append(files.append(inp, size, step.frames))
    finally:
        files.close()
    return placed, files.hashes.result()


def _frames(value: int | None, scale: int, den: int) -> int:
    """A timestamp of a shard's mp4 in frames (exact: shard frames sit at k / fps):
    ``value * scale / den`` (``scale``: time base numerator times fps, ``den``: its
    denominator) rounded half to even like ``round(Fraction)``, in integers."""
    floor, remainder = divmod((value or 0) * scale, den)
    twice = 2 * remainder
    if twice < den or (twice == den and floor % 2 == 0):
        return floor
    return floor + 1
