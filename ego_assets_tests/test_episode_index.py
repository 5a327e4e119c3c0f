"""The shared episode-index registry: once per capture, never reused, safe when runs race."""

from __future__ import annotations

import json
import multiprocessing
import random
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path

import pytest

from ego_assets.errors import CaptureKeyError
from ego_assets.exports.episode_index import EpisodeIndexRegistry
from ego_assets.storage import Storage

KEYS = [f"cap-{i:02d}" for i in range(12)]


def _assign(root: str, keys: list[str], seed: int) -> dict[str, int]:
    """One racing 'run': ask for every key in its own order (process/thread target)."""
    order = list(keys)
    random.Random(seed).shuffle(order)
    registry = EpisodeIndexRegistry(Storage(root))
    return {key: registry.index_for(key) for key in order}


def _assign_s3(root: str, endpoint: str, keys: list[str], seed: int) -> dict[str, int]:
    order = list(keys)
    random.Random(seed).shuffle(order)
    registry = EpisodeIndexRegistry(Storage(root, storage_options={"endpoint_url": endpoint}))
    return {key: registry.index_for(key) for key in order}


def _check_agreement(runs: list[dict[str, int]], keys: list[str]) -> dict[str, int]:
    """Every run saw the same index per key, and no two keys share one."""
    first = runs[0]
    for run in runs[1:]:
        assert run == first
    assert sorted(first) == sorted(keys)
    assert len(set(first.values())) == len(keys)
    return first


def test_assigns_in_order_and_is_idempotent(tmp_path: Path):
    registry = EpisodeIndexRegistry(Storage(tmp_path))
    assert registry.lookup("a") is None
    assert [registry.index_for(k) for k in ("a", "b", "c")] == [0, 1, 2]
    assert registry.index_for("b") == 1
    assert registry.lookup("c") == 2
    # a fresh instance (another run) reads the same stored indices and continues after them
    again = EpisodeIndexRegistry(Storage(tmp_path))
    assert again.lookup("a") == 0
    assert again.index_for("d") == 3
    assert again.claimed() == [0, 1, 2, 3]
    stored = tmp_path / "registry" / "episode-index"
    assert json.loads((stored / "keys" / "d.json").read_text()) == {"index": 3}
    assert json.loads((stored / "claims" / "000003.json").read_text()) == {"capture_key": "d"}
    assert sorted(p.name for p in (stored / "claims").iterdir()) == [
        "000000.json",
        "000001.json",
        "000002.json",
        "000003.json",
    ]


def test_unused_claim_is_never_reused(tmp_path: Path):
    """A run that died between claiming and recording burns its index; nobody reuses it."""
    registry = EpisodeIndexRegistry(Storage(tmp_path))
    assert registry.index_for("a") == 0
    claims = tmp_path / "registry" / "episode-index" / "claims"
    (claims / "000001.json").write_text(json.dumps({"capture_key": "crashed"}))
    assert registry.index_for("b") == 2
    assert registry.index_for("crashed") == 3
    assert registry.lookup("a") == 0


def test_lost_race_for_the_same_key_returns_the_winner(tmp_path: Path):
    """Two runs claim different indices for one capture: the first recorded one wins."""
    registry = EpisodeIndexRegistry(Storage(tmp_path))
    keys = tmp_path / "registry" / "episode-index" / "keys"
    keys.mkdir(parents=True)
    # the other run claimed 0 and recorded it after our lookup, before our record
    claims = keys.parent / "claims"
    claims.mkdir()
    (claims / "000000.json").write_text(json.dumps({"capture_key": "x"}))
    original = registry.lookup
    calls = []

    def late_lookup(key: str) -> int | None:
        calls.append(key)
        if len(calls) == 1:
            (keys / "x.json").write_text(json.dumps({"index": 0}))
            return None
        return original(key)

    registry.lookup = late_lookup  # type: ignore[method-assign]
    assert registry.index_for("x") == 0
    assert EpisodeIndexRegistry(Storage(tmp_path)).claimed() == [0, 1]


def test_rejects_bad_keys(tmp_path: Path):
    registry = EpisodeIndexRegistry(Storage(tmp_path))
    with pytest.raises(CaptureKeyError):
        registry.index_for("../escape")
    with pytest.raises(CaptureKeyError):
        registry.lookup("a/b")


def test_concurrent_processes_and_threads_agree(tmp_path: Path):
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(3, mp_context=ctx) as pool:
        runs = list(pool.map(_assign, [str(tmp_path)] * 3, [KEYS] * 3, range(3)))
    with ThreadPoolExecutor(4) as pool:
        runs += list(pool.map(_assign, [str(tmp_path)] * 4, [KEYS] * 4, range(3, 7)))
    indices = _check_agreement(runs, KEYS)
    registry = EpisodeIndexRegistry(Storage(tmp_path))
    assert {k: registry.lookup(k) for k in KEYS} == indices
    # every used index is a claim made for that very capture
    claims = tmp_path / "registry" / "episode-index" / "claims"
    for key, index in indices.items():
        body = json.loads((claims / f"{index:06d}.json").read_text())
        assert body == {"capture_key": key}
    assert not [p for p in claims.parent.rglob(".*")]  # no temporary files left


def test_s3_exclusive_create_and_concurrent_threads(s3_server, s3_bucket):
    root = f"{s3_bucket}/platform"
    storage = Storage(root, storage_options=s3_server.storage_options)
    registry = EpisodeIndexRegistry(storage)
    assert registry.index_for("first") == 0
    assert registry._create("claims/000000.json", b"{}") is False  # conditional put refused
    with ThreadPoolExecutor(4) as pool:
        runs = list(
            pool.map(_assign_s3, [root] * 4, [s3_server.endpoint_url] * 4, [KEYS] * 4, range(4))
        )
    indices = _check_agreement(runs, KEYS)
    assert 0 not in indices.values()
    assert registry.lookup("first") == 0
    objects = s3_server.keys(root)
    assert "registry/episode-index/keys/first.json" in objects
    assert "registry/episode-index/claims/000000.json" in objects
    bucket = s3_bucket.removeprefix("s3://")
    key = "platform/registry/episode-index/keys/first.json"
    body = s3_server.client().get_object(Bucket=bucket, Key=key)["Body"].read()
    assert json.loads(body) == {"index": 0}
