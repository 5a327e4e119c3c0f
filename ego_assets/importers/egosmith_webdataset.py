"""EgoSmith WebDataset in (``kind = egosmith-webdataset``): each episode of the shards.

A source is a ``.tar`` shard or a folder of them (an episode folder, a packed dataset,
any folder; searched recursively, sorted by path). Samples are grouped into episodes by
the ``<dataset>_ep<episode>`` part of their key; an episode may continue from one shard
into the next. Each episode lands as an ``egosmith_webdataset`` capture
(`ego_assets.capture.egosmith_webdataset`): ``samples.tar`` with the episode's members,
their bytes unchanged, in the source's order, and ``video.mkv``, the JPEGs as a
Motion-JPEG stream (packets copied, nothing re-encoded). An episode folder's
``episode.json`` (the MANO layout) comes along when its episode index matches.

A shard that is truncated (cut inside a member, or missing the two zero blocks that end
an archive) or unreadable is one error naming the file; the episodes it would have
completed do not land (the one being read when it broke, and one that began in it), the
others do.
"""

from __future__ import annotations

import io
import json
import re
import shutil
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

import av
import simplejpeg

from ego_assets.capture.egosmith_webdataset import (
    DEFAULT_FPS,
    EPISODE_FILE,
    SAMPLES_FILE,
    VIDEO_FILE,
)
from ego_assets.importers.core import CutImporter, Derived, EpisodeImportError

KIND = "egosmith-webdataset"
MARKER_KIND = "egosmith_webdataset"
_KEY = re.compile(r"(?P<episode>.+_ep\d{6})_f(?P<frame>\d{6})")
_TIME_BASE = Fraction(1, 1_000_000)  # video pts in microseconds
_END_OF_ARCHIVE = 2 * tarfile.BLOCKSIZE


@dataclass(slots=True)
class Member:
    """Where one member's bytes are: shard, name, data offset and size."""

    shard: Path
    name: str
    offset: int
    size: int


@dataclass(slots=True)
class EgoSmithEpisode:
    """One episode of the shards: its members in source order.

    Attributes:
        episode: ``<dataset>_ep<NNNNNN>``; rel: first shard relative to the source root.
        members: every member of its samples, in source order.
        episode_json: an ``episode.json`` beside its shards describing it, if any.
    """

    episode: str
    rel: str
    members: list[Member] = field(default_factory=list)
    episode_json: Path | None = None

    @property
    def episode_id(self) -> str:
        return f"{self.rel}/{self.episode}"

    def write(self, out: Path) -> Derived:
        """Write ``samples.tar`` and ``video.mkv`` (and ``episode.json``) into ``out``."""
        return write_episode(self, Path(out))


def _shards(src: Path) -> list[tuple[Path, str]]:
    if src.is_file():
        return [(src, src.name)]
    return [(p, p.relative_to(src).as_posix()) for p in sorted(src.rglob("*.tar")) if p.is_file()]


def _end_ok(shard: Path, offset: int) -> bool:
    """Whether the archive ends properly after ``offset`` (two zero blocks)."""
    with shard.open("rb") as fh:
        fh.seek(offset)
        tail = fh.read(_END_OF_ARCHIVE)
    return len(tail) == _END_OF_ARCHIVE and not any(tail)


def iter_episodes(src: Path) -> Iterator[EgoSmithEpisode | EpisodeImportError]:
    """Every episode of the shards of ``src``; a broken shard yields its error in place of
    the episodes it breaks (see the module docstring)."""
    src = Path(src)
    pending: EgoSmithEpisode | None = None
    for shard, rel in _shards(src):
        problem: str | None = None
        started_here: set[str] = set()
        try:
            with tarfile.open(shard, mode="r:") as tar:
                end = 0
                for info in tar:
                    end = info.offset_data + -(-info.size // tarfile.BLOCKSIZE) * tarfile.BLOCKSIZE
                    match = _KEY.fullmatch(info.name.partition(".")[0])
                    if not info.isfile() or match is None:
                        continue
                    name = match["episode"]
                    if pending is None or pending.episode != name:
                        if pending is not None:
                            yield pending
                        pending = EgoSmithEpisode(name, rel, episode_json=_episode_json(shard))
                        started_here.add(name)
                    pending.members.append(Member(shard, info.name, info.offset_data, info.size))
                if shard.stat().st_size < end or not _end_ok(shard, end):
                    problem = "truncated: the archive does not end with its two zero blocks"
        except (tarfile.TarError, EOFError, OSError) as exc:
            problem = f"truncated or unreadable tar: {exc}"
        if problem is not None:
            if pending is not None:
                yield EpisodeImportError(
                    KIND, pending.episode_id, rel, f"{problem}; the episode is incomplete"
                )
                pending = None
            elif not started_here:
                yield EpisodeImportError(KIND, rel, rel, problem)
    if pending is not None:
        yield pending


def _episode_json(shard: Path) -> Path | None:
    path = shard.parent / EPISODE_FILE
    return path if path.is_file() and not path.is_symlink() else None


class EgoSmithWebDatasetImporter(CutImporter):
    """``ego-assets import egosmith-webdataset SRC``: every episode of the shards of SRC."""

    kind = KIND
    capture_kind = MARKER_KIND
    dataset = KIND
    licence = "not stated by the source (no licence file beside the shards)"

    def items(self, root: Path) -> Iterator[EgoSmithEpisode | EpisodeImportError]:
        return iter_episodes(root)


def write_episode(episode: EgoSmithEpisode, out: Path) -> Derived:
    """``samples.tar`` (members byte for byte), ``video.mkv`` (the JPEGs), ``episode.json``;
    what each file was made from."""
    images: list[bytes] = []
    times: list[int | None] = []
    frames: list[int] = []
    handles: dict[Path, object] = {}
    with tarfile.open(out / SAMPLES_FILE, "w", format=tarfile.USTAR_FORMAT) as tar:
        try:
            for m in episode.members:
                fh = handles.get(m.shard) or handles.setdefault(m.shard, m.shard.open("rb"))
                fh.seek(m.offset)  # type: ignore[attr-defined]
                data = fh.read(m.size)  # type: ignore[attr-defined]
                info = tarfile.TarInfo(m.name)
                info.size, info.mode, info.mtime = len(data), 0o444, 0
                tar.addfile(info, io.BytesIO(data))
                if m.name.endswith(".image.jpg"):
                    images.append(data)
                    frames.append(int(_KEY.fullmatch(m.name.partition(".")[0])["frame"]))  # type: ignore[index]
                elif m.name.endswith(".meta.json"):
                    stamp = json.loads(data).get("timestamp_ns")
                    times.append(stamp if isinstance(stamp, int) else None)
        finally:
            for fh in handles.values():
                fh.close()  # type: ignore[attr-defined]
    _write_video(out / VIDEO_FILE, images, times, frames)
    shards = sorted({m.shard.name for m in episode.members})
    made: Derived = {
        SAMPLES_FILE: (
            episode.rel,
            f"the members of {episode.episode} (bytes unchanged) from {', '.join(shards)}",
        ),
        VIDEO_FILE: (episode.rel, "its image.jpg members as Motion-JPEG packets"),
    }
    if episode.episode_json is not None:
        doc = json.loads(episode.episode_json.read_text(encoding="utf-8"))
        number = int(episode.episode.rsplit("_ep", 1)[1])
        if isinstance(doc, dict) and doc.get("episode_index") == number:
            shutil.copyfile(episode.episode_json, out / EPISODE_FILE)
            rel = str(Path(episode.rel).parent / EPISODE_FILE).removeprefix("./")
            made[EPISODE_FILE] = (rel, "")
    return made


def _write_video(
    path: Path, images: list[bytes], times: list[int | None], frames: list[int]
) -> None:
    """The JPEGs as Motion-JPEG packets in Matroska, each at its sample's time (µs)."""
    if not images:
        raise ValueError(f"{path.name}: the episode has no image.jpg")
    height, width, _, _ = simplejpeg.decode_jpeg_header(images[0])
    if all(t is not None for t in times) and len(times) == len(images):
        stamps = [(t - times[0]) // 1000 for t in times]  # type: ignore[operator]
    else:
        stamps = [round((f - frames[0]) * 1e6 / DEFAULT_FPS) for f in frames]
    for k in range(1, len(stamps)):  # a container needs increasing times (faults stay in meta)
        stamps[k] = max(stamps[k], stamps[k - 1] + 1)
    with av.open(str(path), "w", format="matroska") as out:
        stream = out.add_stream("mjpeg", rate=round(DEFAULT_FPS))
        stream.width, stream.height, stream.pix_fmt = width, height, "yuvj420p"
        stream.time_base = _TIME_BASE
        for k, data in enumerate(images):
            packet = av.Packet(data)
            packet.pts = packet.dts = stamps[k]
            nxt = stamps[k + 1] if k + 1 < len(stamps) else stamps[k] + round(1e6 / DEFAULT_FPS)
            packet.duration = max(nxt - stamps[k], 1)
            packet.time_base = _TIME_BASE
            packet.stream = stream
            out.mux(packet)
