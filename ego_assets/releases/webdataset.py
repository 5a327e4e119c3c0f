"""A release's WebDataset: ``webdataset/<split>/<part>/shard-NNNNNN.tar`` and ``index.json``.

Built from the per-episode EgoSmith exports (``exports/egosmith/<key>/``): every sample's
tar bytes (its members' USTAR headers and padded data, as the EgoSmith writer made them:
mode 0444, owner 0:0, mtime 0) are copied byte for byte, headers checked (checksum,
regular file, ``<key>.<known extension>``), nothing decoded, into the release's shards of
the episode's split and part (`layout`), episodes in the part's order, with the EgoSmith
shard writer (a sample never straddles two shards). A part kept from the previous
version keeps its shards there: they are hard-linked and their index entries carried
over, nothing is re-read. Each sample's ``meta.json`` is the episode export's own; the
release split is the shard's folder (and the index), not ``meta.json``'s ``split`` field.

``index.json`` lets a loader shuffle shards and resume: per split its shards, episodes and
samples; per shard its path, split, sample count, bytes, SHA-256 and the byte offset of
every sample's first tar header; per episode its split, first shard and offset, samples.

With a derived action space (``[actions]``), each sample gets three members more after
its own: ``state.npy`` (S float32), ``action.npy`` (A float32) and ``valid.npy`` (bool:
each hand of the state, then the action), the `derived.derive_many` vectors at the sample's
``meta.json`` ``timestamp_ns``; ``index.json``'s ``actions`` holds the space, the
``state_names``, ``action_names`` and ``valid_names``.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ego_assets.actions import ActionSpace
from ego_assets.fileio import json_bytes, json_loads, link_or_copy
from ego_assets.formats import egosmith_constants as C
from ego_assets.formats.egosmith_tar import ShardWriter, tar_sample
from ego_assets.formats.egosmith_webdataset import (
    DEFAULT_SHARD_BYTES,
    EPISODE_FILE,
    EpisodeSummary,
    npy_header,
)
from ego_assets.releases.derived import DERIVE_CHUNK, SourceNotes, derive_many, describe_json
from ego_assets.releases.layout import PartPlan
from ego_assets.releases.select import ReleaseEpisode

FOLDER = "webdataset"
INDEX_FILE = "index.json"
ZERO_BLOCK = bytes(512)  # a tar archive ends with two
_EXTENSIONS = frozenset(e.encode() for e in C.EXTENSIONS)
_EXTENSION_WIDTH = max(len(e) for e in _EXTENSIONS)
EXPORT_NAME = "egosmith_shards"
RUN_BYTES = 64 * 1024 * 1024  # tars read before their run's actions are derived
_Tars = list[tuple[bytes, list[int]]]  # an episode's tars: (bytes, sample bounds) each


class PackError(ValueError):
    """A per-episode export could not be packed; the message names capture and file."""


def _checked_header(header: bytes, where: str) -> tuple[str, int]:
    """(member name, data size) of a USTAR header; PackError naming ``where`` if it is not
    a regular file of a sample (bad checksum, link, folder, unknown extension)."""
    stored = int(header[148:156].split(b"\0")[0].strip() or b"0", 8)
    if stored != sum(header[:148]) + 8 * 32 + sum(header[156:]):
        raise PackError(f"{where}: bad tar header checksum")
    name = header[:100].split(b"\0")[0].decode("utf-8", "replace")
    if header[156:157] not in (b"0", b"\0"):
        raise PackError(f"{where}: member {name!r} is not a regular file")
    stem, _, ext = name.partition(".")
    if "/" in name or not stem or ext not in C.EXTENSIONS:
        raise PackError(f"{where}: member {name!r} is not <key>.<known extension>")
    return name, int(header[124:136].split(b"\0")[0].strip() or b"0", 8)


def _episode_tars(folder: Path, key: str) -> Iterator[tuple[bytes, list[int]]]:
    """Each tar file of one EgoSmith episode folder, in order, as (its bytes, the byte
    offsets where its samples start, then where the last one ends): the members'
    headers and padded data exactly as the export wrote them, every header checked
    (nothing decoded or re-encoded)."""
    index = folder / EPISODE_FILE
    if not index.is_file():
        raise PackError(f"capture {key}: {index}: no episode.json (export not finished)")
    summary = EpisodeSummary.from_json(index.read_text())
    for shard in summary.shards:
        path = folder / shard["name"]
        data = path.read_bytes()
        yield data, _sample_bounds(data, f"capture {key}: {path}")


def _sample_bounds(data: bytes, where: str) -> list[int]:
    """Where the samples of the tar bytes ``data`` start, and where the last one ends.

    Headers as `tarfile` writes them (all the EgoSmith writer's) are read and checked all
    at once (`_usual_bounds`); any other archive, or one that fails a check, is walked
    header by header (`_walked_bounds`), which raises PackError naming ``where``.
    """
    bounds = _usual_bounds(data)
    return bounds if bounds is not None else _walked_bounds(data, where)


_OCTAL_11 = 8 ** np.arange(10, -1, -1, dtype=np.int64)  # size: 11 octal digits, NUL
_OCTAL_6 = 8 ** np.arange(5, -1, -1, dtype=np.int64)  # checksum: 6 octal digits, NUL, space


def _octal(field: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """The octal numbers of digit rows ``field`` (uint8, a row a number): exact where every
    byte is ``0``-``7``, meaningless elsewhere."""
    return (field.astype(np.int64) - ord("0")) @ weights


def _usual_bounds(data: bytes) -> list[int] | None:
    """`_walked_bounds` without a Python step per member, for USTAR headers with the
    fields `tarfile` writes; None when a header is not so or fails a check.

    Every 512-byte block is read as if it were a header: its size gives the block of the
    next header. The chain of headers from block 0 is followed by pointer doubling (the
    first 2m headers from the first m and the m-th successor of every block, log2 of the
    blocks steps), cut at the first zero block; then all of the chain's headers are
    checked at once (size and checksum fields, checksum, type, ``<stem>.<known
    extension>`` names), and samples start where the stem changes.
    """
    n = len(data) // 512
    if n == 0:
        return None
    blocks = np.frombuffer(data, dtype=np.uint8, count=n * 512).reshape(n, 512)
    size = np.clip(_octal(blocks[:, 124:135], _OCTAL_11), 0, len(data))
    after = np.arange(n) + 1 + (size + 511) // 512  # the block after the member's data
    jump = np.append(np.minimum(after, n), n)  # block n: past the end, a fixed point
    chain = np.zeros(1, dtype=np.int64)
    while chain[-1] < n:
        chain = np.concatenate([chain, jump[chain]])
        jump = jump[jump]
    chain = chain[chain < n]
    zero = ~blocks[chain].any(axis=1)
    chain = chain[: int(np.argmax(zero))] if zero.any() else chain
    if not len(chain):
        return []
    end = int(after[chain[-1]]) * 512
    heads = blocks[chain]
    digits = np.concatenate([heads[:, 124:135], heads[:, 148:154]], axis=1)
    stored = _octal(heads[:, 148:154], _OCTAL_6)
    sums = heads.sum(axis=1, dtype=np.int64) - heads[:, 148:156].sum(axis=1, dtype=np.int64)
    names = heads[:, :100]
    column = np.arange(100)
    length = np.where((names == 0).any(axis=1), np.argmax(names == 0, axis=1), 100)
    inside = column < length[:, None]
    dots = (names == ord(".")) & inside
    dot = np.argmax(dots, axis=1)
    if (
        end > len(data)
        or (digits < ord("0")).any()
        or (digits > ord("7")).any()
        or (heads[:, [135, 154]] != 0).any()
        or (heads[:, 155] != ord(" ")).any()
        or (sums + 8 * 32 != stored).any()
        or not np.isin(heads[:, 156], (ord("0"), 0)).all()
        or ((names == ord("/")) & inside).any()
        or not dots.any(axis=1).all()
        or (dot == 0).any()
    ):
        return None
    # each name's extension, moved to the row's start (NUL-padded to the longest known)
    wide = _EXTENSION_WIDTH
    if (length - dot - 1 > wide).any():
        return None
    at = np.minimum(dot[:, None] + 1 + np.arange(wide), 99)
    extensions = np.where(at < length[:, None], np.take_along_axis(names, at, axis=1), 0)
    if not set(np.ascontiguousarray(extensions).view(f"S{wide}").ravel().tolist()) <= _EXTENSIONS:
        return None
    stems = np.where(column < dot[:, None], names, 0)
    starts = np.ones(len(chain), dtype=bool)
    starts[1:] = (stems[1:] != stems[:-1]).any(axis=1)
    return [*(chain[starts] * 512).tolist(), end]


def _walked_bounds(data: bytes, where: str) -> list[int]:
    """`_sample_bounds` header by header: the walk reads each header's name, type and
    size; the checksums of all headers are summed at once (numpy). The first header that
    fails any check is then checked again by `_checked_header`, which raises what it
    finds (PackError naming ``where``)."""
    bounds: list[int] = []
    headers: list[int] = []
    stored: list[int] = []
    sample = b""
    pos, end = 0, len(data)
    failed = False
    while pos + 512 <= end and data[pos : pos + 512] != ZERO_BLOCK:
        headers.append(pos)
        try:
            stored.append(int(data[pos + 148 : pos + 156].split(b"\0")[0].strip() or b"0", 8))
            name = data[pos : pos + 100].split(b"\0")[0]
            stem, _, ext = name.partition(b".")
            size = int(data[pos + 124 : pos + 136].split(b"\0")[0].strip() or b"0", 8)
        except ValueError:
            failed = True
            break
        if (
            data[pos + 156 : pos + 157] not in (b"0", b"\0")
            or b"/" in name
            or not stem
            or ext not in _EXTENSIONS
        ):
            failed = True
            break
        if stem != sample:
            bounds.append(pos)
            sample = stem
        pos += 512 + size + (-size % 512)
    wrong = np.zeros(0, dtype=np.intp)
    if stored:
        blocks = np.frombuffer(data, dtype=np.uint8)[
            np.asarray(headers[: len(stored)])[:, None] + np.arange(512)
        ]
        sums = blocks.sum(axis=1, dtype=np.int64) - blocks[:, 148:156].sum(axis=1, dtype=np.int64)
        wrong = np.flatnonzero(sums + 8 * 32 != np.asarray(stored))
    if len(wrong) or failed:
        first = headers[int(wrong[0])] if len(wrong) else headers[-1]
        _checked_header(data[first : first + 512], where)
        raise PackError(f"{where}: bad tar header at byte {first}")  # _checked_header raised
    if pos > end:
        raise PackError(f"{where}: truncated (a member runs past the end)")
    if bounds:
        bounds.append(pos)
    return bounds


def _sample_meta(data: bytes, bounds: list[int]) -> list[tuple[str, int]]:
    """(key, ``meta.json`` ``timestamp_ns``) of every sample of checked tar bytes."""
    out = []
    for start, end in itertools.pairwise(bounds):
        pos, found = start, None
        while pos < end and found is None:
            name = data[pos : pos + 100].split(b"\0")[0]
            size = int(data[pos + 124 : pos + 136].split(b"\0")[0].strip() or b"0", 8)
            if name.endswith(b".meta.json"):
                meta = json_loads(data[pos + 512 : pos + 512 + size])
                found = (name[: -len(b".meta.json")].decode(), int(meta["timestamp_ns"]))
            pos += 512 + size + (-size % 512)
        if found is None:
            raise PackError(f"sample at byte {start}: no meta.json")
        out.append(found)
    return out


def _member_blocks(keys: list[str], ext: str, payloads: np.ndarray) -> np.ndarray:
    """(N, 512 + padded payload) uint8: member ``<key>.<ext>`` of every sample, its USTAR
    header and padded data exactly as `tar_sample` writes them (``payloads``: (N, B)
    uint8, one row a sample). The first header is `tarfile`'s; the others are it with
    their name and checksum set, all at once (the keys have one length)."""
    n, size = payloads.shape
    template = np.frombuffer(tar_sample(keys[0], [(ext, bytes(size))])[:512], dtype=np.uint8)
    heads = np.repeat(template[None, :], n, axis=0)
    names = np.frombuffer("".join(f"{k}.{ext}" for k in keys).encode(), dtype=np.uint8)
    heads[:, : len(keys[0]) + 1 + len(ext)] = names.reshape(n, -1)
    heads[:, 148:156] = ord(" ")
    sums = heads.sum(axis=1, dtype=np.int64)
    digits = (sums[:, None] // 8 ** np.arange(5, -1, -1)) % 8 + ord("0")
    heads[:, 148:154] = digits.astype(np.uint8)
    heads[:, 154] = 0
    padded = np.zeros((n, size + (-size % 512)), dtype=np.uint8)
    padded[:, :size] = payloads
    return np.concatenate([heads, padded], axis=1)


def _state_members(keys: list[str], table: Any, valid: np.ndarray) -> np.ndarray:
    """(N, bytes) uint8: the ``state.npy``, ``action.npy`` and ``valid.npy`` members of
    every sample (`tar_sample`'s bytes; by it alone when the keys differ in length)."""
    arrays = (("state.npy", table.state), ("action.npy", table.action), ("valid.npy", valid))
    payloads = [
        (
            ext,
            np.concatenate(
                [
                    np.frombuffer(npy_header(a[0]), np.uint8)[None].repeat(len(a), 0),
                    np.ascontiguousarray(a).view(np.uint8).reshape(len(a), -1),
                ],
                axis=1,
            ),
        )
        for ext, a in arrays
    ]
    if len({len(k) for k in keys}) == 1 and len(keys[0]) + 11 <= 100:
        return np.concatenate([_member_blocks(keys, ext, p) for ext, p in payloads], axis=1)
    rows = [
        tar_sample(key, [(ext, p[i].tobytes()) for ext, p in payloads])
        for i, key in enumerate(keys)
    ]
    return np.frombuffer(b"".join(rows), dtype=np.uint8).reshape(len(keys), -1)


def _with_actions(tars: _Tars, samples: list[list[tuple[str, int]]], table: Any) -> _Tars:
    """The episode's tars (bytes, sample bounds), each sample followed by its
    ``state.npy``, ``action.npy`` and ``valid.npy`` members (see the module docstring):
    the rows of ``table`` (`ActionTable`, derived on the samples' ``timestamp_ns``;
    ``samples``: `_sample_meta` of each tar)."""
    hands = [h for h in table.valid if h != "action"]
    valid = np.stack([table.valid[h] for h in (*hands, "action")], axis=1)
    extras = _state_members([k for part in samples for k, _ in part], table, valid)
    width = extras.shape[1]
    out = []
    row = 0
    for (data, bounds), part in zip(tars, samples, strict=True):
        pieces: list[bytes | memoryview] = []
        view = memoryview(data)
        for i in range(len(part)):
            pieces += (view[bounds[i] : bounds[i + 1]], extras[row + i].data)
        sizes = np.diff(np.asarray(bounds, dtype=np.int64)) + width
        out.append((b"".join(pieces), [0, *np.cumsum(sizes).tolist()]))
        row += len(part)
    return out


def _episodes_with_actions(
    root: Path, members: Sequence[ReleaseEpisode], space: ActionSpace, notes: SourceNotes
) -> Iterator[tuple[ReleaseEpisode, _Tars, Any]]:
    """Each episode's tars with their state members (`_with_actions`) and its table (None
    for an episode with no sample), in order, a run of episodes at a time (`_runs`)."""
    for run in _runs(root, members):
        yield from _run_with_actions(root, run, space, notes)


def _runs(
    root: Path, members: Sequence[ReleaseEpisode]
) -> Iterator[list[tuple[ReleaseEpisode, _Tars]]]:
    """The episodes and their tars (those with samples), in runs of up to `DERIVE_CHUNK`
    episodes or `RUN_BYTES` of tars."""
    run: list[tuple[ReleaseEpisode, _Tars]] = []
    size = 0
    for episode in members:
        source = Path(root) / episode.exports[EXPORT_NAME]["path"]
        whole = [t for t in _episode_tars(source, episode.capture_key) if len(t[1]) > 1]
        run.append((episode, whole))
        size += sum(len(data) for data, _ in whole)
        if len(run) == DERIVE_CHUNK or size >= RUN_BYTES:
            yield run
            run, size = [], 0
    if run:
        yield run


def _run_with_actions(
    root: Path, run: list[tuple[ReleaseEpisode, _Tars]], space: ActionSpace, notes: SourceNotes
) -> list[tuple[ReleaseEpisode, _Tars, Any]]:
    """`_episodes_with_actions` of one run: its tables derived together (`derive_many`)."""
    samples = {e.capture_key: [_sample_meta(d, b) for d, b in tars] for e, tars in run}
    clocks = {
        key: np.array([t for part in parts for _, t in part], dtype=np.int64)
        for key, parts in samples.items()
    }
    keys = [e.capture_key for e, tars in run if tars]
    made = derive_many(root, keys, space, lambda k, _: clocks[k], notes)
    tables = dict(zip(keys, made, strict=True))
    out: list[tuple[ReleaseEpisode, _Tars, Any]] = []
    for episode, tars in run:
        table = tables.get(episode.capture_key)
        if table is not None:
            tars = _with_actions(tars, samples[episode.capture_key], table)
        out.append((episode, tars, table))
    return out


def _pack_part(
    root: Path,
    members: Sequence[ReleaseEpisode],
    folder: Path,
    prefix: str,
    shard_bytes: int,
    space: ActionSpace | None = None,
    described: dict[str, Any] | None = None,
    notes: SourceNotes | None = None,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Write one split's part into ``folder``: its (shards, episodes) index entries, paths
    starting with ``prefix`` (``<split>/<part>/``); a derived ``space`` adds each sample's
    state and actions (their names go to ``described``)."""
    folder.mkdir(parents=True, exist_ok=True)
    writer = ShardWriter(folder, shard_bytes)
    offsets: dict[str, list[int]] = {}
    entries: list[dict[str, Any]] = []
    split = prefix.split("/")[0]
    if space is not None and space.derived:
        episodes: Iterable[tuple[ReleaseEpisode, Iterable[tuple[bytes, list[int]]], Any]] = (
            _episodes_with_actions(root, members, space, notes or SourceNotes())
        )
    else:
        episodes = (
            (e, _episode_tars(Path(root) / e.exports[EXPORT_NAME]["path"], e.capture_key), None)
            for e in members
        )
    for episode, tars, table in episodes:
        first: tuple[str, int] | None = None
        count = 0
        named = described is not None and "state_names" in described
        if table is not None and space is not None and described is not None and not named:
            described.update(describe_json(space, table))
            described["valid_names"] = [*(h for h in table.valid if h != "action"), "action"]
        for data, bounds in tars:
            for shard, offset in writer.write_samples(data, bounds):
                offsets.setdefault(shard, []).append(offset)
                first = first or (shard, offset)
                count += 1
        entries.append(
            {
                "capture_key": episode.capture_key,
                "split": split,
                "samples": count,
                "shard": f"{prefix}{first[0]}" if first else None,
                "offset": first[1] if first else None,
            }
        )
    shards = [
        {
            "path": f"{prefix}{info.name}",
            "split": split,
            "samples": info.samples,
            "bytes": info.bytes,
            "sha256": info.sha256,
            "offsets": offsets[info.name],
        }
        for info in writer.close()
    ]
    return shards, entries


def pack_webdataset(
    root: Path,
    episodes: Sequence[ReleaseEpisode],
    splits: Sequence[str],
    out: Path,
    shard_bytes: int = DEFAULT_SHARD_BYTES,
    plan: PartPlan | None = None,
    space: ActionSpace | None = None,
) -> dict[str, Any]:
    """Write ``out/webdataset/`` for ``episodes`` (exports below the data root ``root``),
    part by part (``plan``; default: one part ``v1`` in the given order).

    Returns:
        The content of ``index.json`` (also written, last).
    """
    plan = plan or PartPlan([{"name": "v1", "episodes": [e.capture_key for e in episodes]}])
    target = Path(out) / FOLDER
    shards: list[dict[str, Any]] = []
    entries: list[dict[str, Any]] = []
    by_key = {e.capture_key: e for e in episodes}
    earlier: dict[str, Any] | None = None
    derived = space is not None and space.derived
    described: dict[str, Any] = {}
    notes = SourceNotes()
    for split in splits:
        for part in plan.parts:
            members = [by_key[k] for k in part["episodes"] if by_key[k].split == split]
            if not members:
                continue
            prefix = f"{split}/{part['name']}/"
            previous = plan.reusable(part["name"])
            if previous is None:
                got = _pack_part(
                    root, members, target / prefix, prefix, shard_bytes, space, described, notes
                )
                shards += got[0]
                entries += got[1]
                continue
            if earlier is None:
                earlier = json.loads((previous / FOLDER / INDEX_FILE).read_text())
                if derived and "state_names" in earlier.get("actions", {}):
                    described = {**earlier["actions"], **described}
                    notes.merge(earlier["actions"].get("sources", {}))
            for shard in earlier["shards"]:
                if shard["path"].startswith(prefix):
                    link_or_copy(previous / FOLDER / shard["path"], target / shard["path"])
                    shards.append(shard)
            keys = {e.capture_key for e in members}
            entries += [e for e in earlier["episodes"] if e["capture_key"] in keys]
    index = {
        "format": "webdataset",
        "samples": sum(s["samples"] for s in shards),
        "splits": {
            split: {
                "shards": [s["path"] for s in shards if s["split"] == split],
                "episodes": sum(1 for e in entries if e["split"] == split),
                "samples": sum(s["samples"] for s in shards if s["split"] == split),
            }
            for split in splits
        },
        "shards": shards,
        "episodes": entries,
    }
    if space is not None and derived:
        index["actions"] = {**(described or describe_json(space)), "sources": notes.to_json()}
    target.mkdir(parents=True, exist_ok=True)
    (target / INDEX_FILE).write_bytes(json_bytes(index, indent=1, sort_keys=True) + b"\n")
    return index
