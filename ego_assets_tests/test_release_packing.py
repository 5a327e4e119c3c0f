"""The release packers' fast paths give what the simple ones gave: tar sample bounds and
header checks, shard runs, the renumbered columns' stats, stacked episode stats."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from ego_assets.formats.ceres_lerobot import (
    STAT_NAMES,
    column_stats,
    episodes_table,
    episodes_table_stacked,
    stack_stats,
)
from ego_assets.formats.ceres_merge import aggregate_stats, run_stats
from ego_assets.formats.egosmith_tar import ShardWriter, tar_sample
from ego_assets.releases.webdataset import (
    PackError,
    _checked_header,
    _sample_bounds,
    _usual_bounds,
    _walked_bounds,
)

MEMBERS = ("image.jpg", "lowdim.npy", "meta.json")


def _samples(count: int, seed: int = 0) -> list[bytes]:
    rng = np.random.default_rng(seed)
    return [
        tar_sample(
            f"ds_ep000001_f{i:06d}",
            [(ext, rng.bytes(int(rng.integers(1, 3000)))) for ext in MEMBERS],
        )
        for i in range(count)
    ]


def _with_checksum(header: bytearray) -> bytearray:
    header[148:156] = b" " * 8
    header[148:156] = b"%06o\0 " % sum(header)
    return header


def test_sample_bounds_are_where_samples_start():
    samples = _samples(7)
    data = b"".join(samples) + bytes(1024)
    starts = np.cumsum([0] + [len(s) for s in samples]).tolist()
    assert _sample_bounds(data, "here") == starts
    assert _sample_bounds(bytes(1024), "here") == []


@pytest.mark.parametrize("count, tail", [(1, 1024), (7, 1024), (40, 0), (3, 10240)])
def test_headers_read_at_once_are_the_walk(count, tail):
    """The vectorized reading finds the walk's bounds (with or without the two zero
    blocks that end an archive, and past a record's padding)."""
    samples = _samples(count, seed=count)
    data = b"".join(samples) + bytes(tail)
    want = np.cumsum([0] + [len(s) for s in samples]).tolist()
    assert _usual_bounds(data) == want
    assert _walked_bounds(data, "here") == want
    assert _usual_bounds(bytes(1024)) == [] and _usual_bounds(b"") is None


@pytest.mark.parametrize("damage", ["checksum", "type", "name", "folder", "truncated"])
def test_sample_bounds_raise_what_the_header_check_raises(damage):
    samples = _samples(4)
    data = bytearray(b"".join(samples) + bytes(1024))
    at = len(samples[0]) + len(samples[1])  # third sample's first header
    header = bytearray(data[at : at + 512])
    if damage == "checksum":
        header[0] ^= 1
    elif damage == "type":
        header[156:157] = b"5"
        header = _with_checksum(header)
    elif damage == "name":
        header[0:100] = b"x.unknown".ljust(100, b"\0")
        header = _with_checksum(header)
    elif damage == "folder":
        header[0:100] = b"a/b.meta.json".ljust(100, b"\0")
        header = _with_checksum(header)
    data[at : at + 512] = header
    if damage == "truncated":
        data = data[: len(samples[0]) + 700]
        want = "truncated"
    else:
        with pytest.raises(PackError) as expected:
            _checked_header(bytes(header), "here")
        want = str(expected.value)
    assert _usual_bounds(bytes(data)) is None  # left to the walk, which names the cause
    with pytest.raises(PackError) as got:
        _sample_bounds(bytes(data), "here")
    assert want in str(got.value)


@pytest.mark.parametrize("shard_bytes", [1, 9000, 20_000, 10**9])
def test_write_samples_matches_one_sample_at_a_time(tmp_path, shard_bytes):
    samples = _samples(12, seed=3)
    one, runs = tmp_path / "one", tmp_path / "runs"
    one.mkdir()
    runs.mkdir()
    writer = ShardWriter(one, shard_bytes)
    placed = []
    for sample in samples:
        writer.write_sample(sample)
        placed.append(writer.last_sample)
    shards = writer.close()
    data = b"".join(samples)
    bounds = np.cumsum([0] + [len(s) for s in samples]).tolist()
    batched = ShardWriter(runs, shard_bytes)
    got = batched.write_samples(data[: bounds[5]], bounds[:6])
    got += batched.write_samples(data[bounds[5] :], [b - bounds[5] for b in bounds[5:]])
    assert got == placed and batched.close() == shards
    for info in shards:
        assert (runs / info.name).read_bytes() == (one / info.name).read_bytes()


def test_run_stats_are_column_stats_bit_for_bit():
    rng = np.random.default_rng(5)
    lengths = np.concatenate([[1, 2, 3, 7, 8, 9, 128, 129, 1000], rng.integers(1, 5000, 40)])
    firsts = rng.integers(0, 2**31, len(lengths))
    for step in (0, 1):
        got = run_stats(firsts, lengths, step)
        for i, (first, n) in enumerate(zip(firsts, lengths, strict=True)):
            want = column_stats(first + step * np.arange(n, dtype=np.int64))
            for name in STAT_NAMES:
                assert got[name][i].dtype == want[name].dtype
                assert got[name][i].tobytes() == want[name].tobytes(), (step, n, name)
    with pytest.raises(ValueError):
        run_stats(np.array([0]), np.array([0]), 1)


def _reference_table(rows, stats) -> pa.Table:
    """`episodes_table` as it was: one Python list an episode."""
    first = [k for k in rows[0] if not k.startswith("meta/")]
    columns = {k: [r[k] for r in rows] for k in first}
    types = {k: pa.int64() for k in first}
    for feature in stats[0]:
        for name in STAT_NAMES:
            values = [np.asarray(s[feature][name]).tolist() for s in stats]
            depth = np.asarray(values[0]).ndim
            inner: pa.DataType = pa.float64()
            for _ in range(depth):
                inner = pa.list_(inner)
            columns[f"stats/{feature}/{name}"] = values
            types[f"stats/{feature}/{name}"] = pa.list_(pa.int64()) if name == "count" else inner
    for k in ("meta/episodes/chunk_index", "meta/episodes/file_index"):
        columns[k], types[k] = [r[k] for r in rows], pa.int64()
    return pa.Table.from_pydict(columns, schema=pa.schema(list(types.items())))


def test_stacked_episode_stats_make_the_same_table_and_aggregate():
    rng = np.random.default_rng(9)
    stats = []
    for n in (5, 60, 17):
        episode = {
            "state": column_stats(rng.normal(size=(n, 4)).astype(np.float32)),
            "frame_index": {
                k: (v.astype(np.int64) if k in ("min", "max") else v)
                for k, v in column_stats(np.arange(n)).items()
            },
            "camera": {
                k: np.asarray(v).reshape(-1, 1, 1)
                for k, v in column_stats(rng.random((n, 3))).items()
            },
        }
        episode["camera"]["count"] = np.array([n])
        stats.append(episode)
    rows = [
        {
            "episode_index": i,
            "length": 1,
            "meta/episodes/chunk_index": 0,
            "meta/episodes/file_index": 0,
        }
        for i in range(3)
    ]
    assert episodes_table(rows, stats).equals(_reference_table(rows, stats))
    stacked = stack_stats(stats)
    assert episodes_table_stacked(rows, stacked).equals(_reference_table(rows, stats))
    agg = aggregate_stats(stacked)
    counts = np.array([5.0, 60.0, 17.0])
    w = counts / counts.sum()
    means = np.stack([s["state"]["mean"] for s in stats])
    assert np.array_equal(agg["state"]["mean"], (w[:, None] * means).sum(axis=0))
    assert agg["frame_index"]["max"].tolist() == [59] and agg["state"]["count"].tolist() == [82]
    assert agg["camera"]["mean"].shape == (3, 1, 1)
