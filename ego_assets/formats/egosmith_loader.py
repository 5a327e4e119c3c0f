"""Training loader for EgoSmith shards, built on the ``webdataset`` library.

Shards hold single frames; training wants short windows. `window_dataset` reads shards
with ``webdataset.WebDataset``, decodes the members (``.npy`` and ``.json`` with
webdataset's own handlers, JPEG with libjpeg-turbo) and groups *consecutive* frames of
one episode into windows: ``state_horizon`` frames of observation ending at frame ``t``
and the ``action_horizon`` actions of frames ``t .. t + action_horizon - 1``. A window
never spans two episodes, nor a gap: frames are consecutive when their ``sample_index``
(position in the episode) follows on. Windows are shuffled after grouping (a shuffle
before it would break the runs of frames); shard order can be shuffled too.

Example::

    from ego_assets.formats.egosmith_loader import window_dataset, split_shards

    urls = split_shards("data/exports/egosmith-dataset", "train")
    for window in window_dataset(urls, state_horizon=2, action_horizon=8, shuffle=256):
        window["state"]   # (2, 48) float32: wrist_state + hand_state per frame
        window["action"]  # (8, 48) float32: wrist_action + hand_action per step
        window["image"]   # (2, H, W, 3) uint8 RGB head-camera frames
"""

from __future__ import annotations

import json
import random
from collections import deque
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import simplejpeg
import webdataset as wds

from ego_assets.formats import egosmith_constants
from ego_assets.formats.egosmith_webdataset import MANIFEST_FILE, parse_key


def split_shards(dataset_dir: str | Path, split: str) -> list[str]:
    """Paths of the shards of ``split`` (``train`` / ``val``) listed in ``manifest.json``."""
    folder = Path(dataset_dir)
    manifest = json.loads((folder / MANIFEST_FILE).read_text())
    return [str(folder / name) for name in manifest["splits"][split]["shards"]]


def _decode_jpeg(key: str, data: bytes) -> np.ndarray | None:
    """webdataset decoder handler: ``*.jpg`` -> (H, W, 3) uint8 RGB."""
    if key.lower().endswith(".jpg"):
        return simplejpeg.decode_jpeg(data, colorspace="RGB")
    return None


def frame_dataset(
    urls: str | list[str], *, shardshuffle: bool | int = False, images: bool = True, seed: int = 0
) -> wds.WebDataset:
    """Decoded per-frame samples (dict with ``__key__``, ``image.jpg``, ``lowdim.npy``...)."""
    dataset = wds.WebDataset(urls, shardshuffle=shardshuffle, seed=seed, empty_check=False)
    if not images:
        dataset = dataset.map(lambda s: {k: v for k, v in s.items() if k != "image.jpg"})
    return dataset.decode(_decode_jpeg)


def windows(
    samples: Iterable[dict[str, Any]], state_horizon: int, action_horizon: int, stride: int = 1
) -> Iterator[dict[str, Any]]:
    """Group decoded per-frame samples into windows (see the module docstring).

    Output per window: ``__key__`` (the key of frame ``t``), ``episode_index``,
    ``frame_index`` (L,) int64 with L = state_horizon + action_horizon - 1, ``state``
    (S, 48), ``action`` (A, 48), ``extrinsic`` (S, 4, 4), ``intrinsic`` (S, 4),
    ``presence`` (S,) uint8, and ``image`` (S, H, W, 3) when images were decoded.
    """
    if state_horizon < 1 or action_horizon < 1 or stride < 1:
        raise ValueError("state_horizon, action_horizon and stride must be >= 1")
    length = state_horizon + action_horizon - 1
    run: deque[dict[str, Any]] = deque(maxlen=length)
    since_emit = 0
    for sample in samples:
        _, episode, _ = parse_key(sample["__key__"])
        meta = sample["meta.json"]
        last = run[-1] if run else None
        follows = (
            last is not None
            and last["_episode"] == episode
            and last["meta.json"]["sample_index"] + 1 == meta["sample_index"]
        )
        if not follows:
            run.clear()
            since_emit = 0
        run.append({**sample, "_episode": episode})
        if len(run) < length:
            continue
        if since_emit % stride == 0:
            yield _window(list(run), state_horizon, action_horizon)
        since_emit += 1


def _window(frames: list[dict[str, Any]], s: int, a: int) -> dict[str, Any]:
    lowdim = np.stack([f["lowdim.npy"] for f in frames])
    observed = frames[:s]
    out: dict[str, Any] = {
        "__key__": frames[s - 1]["__key__"],
        "episode_index": frames[0]["_episode"],
        "frame_index": np.array([f["meta.json"]["frame_index"] for f in frames], np.int64),
        "state": lowdim[:s, egosmith_constants.STATE],
        "action": lowdim[s - 1 : s - 1 + a, egosmith_constants.ACTION],
        "extrinsic": lowdim[:s, egosmith_constants.EXTRINSIC].reshape(s, 4, 4),
        "intrinsic": lowdim[:s, egosmith_constants.INTRINSIC],
        "presence": np.array([f["meta.json"]["presence"] for f in observed], np.uint8),
    }
    if "image.jpg" in frames[0]:
        out["image"] = np.stack([f["image.jpg"] for f in observed])
    return out


def window_dataset(
    urls: str | list[str],
    *,
    state_horizon: int = 1,
    action_horizon: int = 1,
    stride: int = 1,
    shuffle: int = 0,
    shardshuffle: bool | int = False,
    images: bool = True,
    seed: int = 0,
) -> wds.WebDataset:
    """A webdataset pipeline of windows (iterable; works with a torch ``DataLoader``).

    Args:
        urls: shard paths or URLs (brace notation works, as in webdataset).
        state_horizon: observed frames per window (S).
        action_horizon: actions per window (A).
        stride: emit every ``stride``-th window of a run of frames.
        shuffle: window shuffle buffer size (0 = keep order).
        shardshuffle: shuffle shard order (webdataset's ``shardshuffle``).
        images: decode and return the frames' images.
        seed: seed of both shuffles.
    """
    dataset = frame_dataset(urls, shardshuffle=shardshuffle, images=images, seed=seed)
    dataset = dataset.compose(lambda source: windows(source, state_horizon, action_horizon, stride))
    if shuffle:
        dataset = dataset.shuffle(shuffle, rng=random.Random(seed))
    return dataset
