"""`ego-assets validate` on CERES shards and datasets; SIGKILL at any point leaves no
finished-looking shard, and the rerun completes and validates."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ego_assets import pipeline
from ego_assets.catalog.receipts import read_receipt
from ego_assets.cli import main
from ego_assets.exports import ceres as ceres_export
from ego_assets.exports.episode_index import EpisodeIndexRegistry
from ego_assets.exports.run import run_export
from ego_assets.formats.ceres_lerobot import shard_name, write_shard
from ego_assets.formats.ceres_lerobot_validate import validate_dataset
from ego_assets.formats.ceres_merge import merge_shards
from ego_assets.storage import Storage
from ego_assets.synth import synthesize
from ego_assets_tests.ceres_helpers import synth_capture


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    root = tmp_path_factory.mktemp("ceres-validate")
    out = []
    for i, (kind, faults) in enumerate((("webxr", ("retried_segment",)), ("webxr", ()))):
        trajectory, raw = synth_capture(root, kind, f"v-{i}", seed=40 + i, faults=faults)
        shard = root / "shards" / shard_name(7 + i)
        shard.mkdir(parents=True)
        write_shard(trajectory, raw, 7 + i, shard)
        out.append(shard)
    merged = root / "merged"
    merged.mkdir()
    merge_shards(out, merged)
    return root, out, merged


def test_exports_conform(shards, capsys):
    _, (first, second), merged = shards
    assert validate_dataset(first) == []
    assert validate_dataset(second) == []
    assert validate_dataset(merged) == []
    assert main(["validate", str(first)]) == 0
    assert "CERES LeRobot v3: conforms" in capsys.readouterr().out


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def test_every_deviation_is_named(shards, tmp_path, capsys):
    _, (first, _), _ = shards
    bad = _copy(first, tmp_path / "bad")
    info = json.loads((bad / "meta/info.json").read_text())
    info["total_frames"] += 1
    info["features"]["observation.state"]["names"][3] = "head.position.q"
    (bad / "meta/info.json").write_text(json.dumps(info))
    data = next(bad.glob("data/*/*.parquet"))
    table = pq.read_table(data)
    index = table.schema.get_field_index("index")
    shifted = pa.array(table.column("index").to_numpy() + 1)
    pq.write_table(table.set_column(index, "index", shifted), data)
    (bad / "notes.txt").write_text("not in the receipt\n")
    problems = validate_dataset(bad)
    text = "\n".join(problems)
    assert "meta/info.json: features.observation.state.names" in text
    assert "info says 46" in text
    assert "row 0: index 1, expected 0" in text
    assert "meta/info.json: SHA-256" in text
    assert f"{data.relative_to(bad).as_posix()}: SHA-256" in text
    assert "notes.txt: not listed in ceres/browser-export-receipt.json" in text
    assert main(["validate", str(bad)]) == 1
    printed = capsys.readouterr().out
    assert f"{len(problems)} deviations" in printed


def test_gap_and_untracked_rules_and_missing_video(shards, tmp_path):
    _, (_, second), _ = shards
    bad = _copy(second, tmp_path / "bad")
    data = next(bad.glob("data/*/*.parquet"))
    table = pq.read_table(data)
    gap = table.column("ceres.source_gap").to_numpy(zero_copy_only=False)
    row = int(gap.nonzero()[0][0])
    action = table.column("action").combine_chunks().flatten().to_numpy().reshape(-1, 2).copy()
    action[row] = [0.05, 0.05]
    column = pa.FixedSizeListArray.from_arrays(pa.array(action.ravel()), 2)
    pq.write_table(table.set_column(1, "action", column), data)
    next(bad.glob("videos/*/*/*.mp4")).unlink()
    text = "\n".join(validate_dataset(bad))
    assert f"row {row}: gap row with a tracking flag or a pinch set" in text
    assert "missing (episodes [8])" in text


CHILD = textwrap.dedent(
    """
    import os, signal, sys
    from pathlib import Path
    from ego_assets.exports import ceres as ceres_export, run as export_run
    from ego_assets.formats import ceres_lerobot
    from ego_assets.storage import Storage

    root, key, point = sys.argv[1], sys.argv[2], sys.argv[3]

    def killing(function):
        def wrapper(*args, **kwargs):
            result = function(*args, **kwargs)
            os.kill(os.getpid(), signal.SIGKILL)
            return result
        return wrapper

    def kill_before(function):
        def wrapper(*args, **kwargs):
            os.kill(os.getpid(), signal.SIGKILL)
        return wrapper

    if point == "data":
        ceres_lerobot.write_data = killing(ceres_lerobot.write_data)
    elif point == "video":
        import av  # lerobot_video imports PyAV where used: patch the module itself

        av.open = kill_before(av.open)
    elif point == "receipt":
        ceres_lerobot.write_receipt = killing(ceres_lerobot.write_receipt)
    elif point == "rename":
        import ego_assets.trajectory.store as store
        real = store.os.replace
        def replace(src, dst):
            if str(dst).endswith(key):
                os.kill(os.getpid(), signal.SIGKILL)
            return real(src, dst)
        store.os.replace = replace
    elif point == "export-receipt":
        export_run.write_receipt = kill_before(export_run.write_receipt)
    store = Storage(root)
    export_run.run_export(store, key, ceres_export.CeresExporter())
    print("finished")
    """
)


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    root = tmp_path_factory.mktemp("ceres-crash")
    landing = root / "landing"
    synthesize("webxr", landing / "k-1", seconds=2, seed=51, capture_id="k-1")
    storage = Storage(root)
    pipeline.ingest_raw(storage, "k-1")
    pipeline.normalize(storage, "k-1")
    pipeline.assess_quality(storage, "k-1")
    return root


@pytest.mark.parametrize("point", ["data", "video", "receipt", "rename", "export-receipt"])
def test_sigkill_leaves_nothing_taken_as_finished(prepared, tmp_path, point):
    root = tmp_path / "store"
    shutil.copytree(prepared, root)
    run = subprocess.run(
        [sys.executable, "-c", CHILD, str(root), "k-1", point],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == -9, run.stderr[-2000:]
    assert "finished" not in run.stdout
    storage = Storage(root)
    target = ceres_export.export_root(storage, "k-1")
    if point == "export-receipt":
        # the shard was in place (lineage written last), only the receipt was missing
        assert ceres_export.stored_lineage(storage, "k-1") is not None
    else:
        assert ceres_export.stored_lineage(storage, "k-1") is None
        assert not Path(target.path).exists()  # only a hidden temporary sibling, if any
        assert ceres_export.current_shards(storage) == []
    assert read_receipt(storage, "ceres_episode", "k-1") is None
    index = EpisodeIndexRegistry(storage).lookup("k-1")
    assert index == 0
    result = run_export(storage, "k-1", ceres_export.CeresExporter())
    assert result.figures["episode_index"] == 0
    assert result.reused == (point == "export-receipt")
    shard = Path(target.path) / "shards" / shard_name(0)
    assert validate_dataset(shard) == []
    assert read_receipt(storage, "ceres_episode", "k-1") is not None
