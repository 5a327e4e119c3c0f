"""Dataset releases: the spec, the selection over the catalog, versions, diff, and the
WebDataset, robomimic-style HDF5 and packed LeRobot v3 formats.

One module-scoped data root holds four real 2 s synthetic captures carried through the
pipeline (raw, trajectory, quality gate), exported as EgoSmith shards, Holos HDF5 and
CERES LeRobot shards with their receipts, staged and built into the dbt catalog: two
clean WebXR captures, one Vision Pro capture and a faulty WebXR one whose gate blocks
its exports.
"""

import io
import json
import os
import shutil
import tarfile
from pathlib import Path

import h5py
import numpy as np
import pyarrow.parquet as pq
import pytest
import webdataset as wds
import yaml

from ego_assets import pipeline
from ego_assets.catalog.sources import stage_rows
from ego_assets.catalog.warehouse import catalog_database, run_dbt
from ego_assets.cli import main
from ego_assets.exports.ceres import CeresExporter
from ego_assets.exports.egosmith import EgoSmithExporter, episode_path, stored_episode
from ego_assets.exports.holos import HolosExporter
from ego_assets.exports.run import export_capture
from ego_assets.fileio import file_sha256
from ego_assets.formats.ceres_lerobot import CAMERA_KEY
from ego_assets.formats.egosmith_webdataset import EgoSmithOptions
from ego_assets.pipeline import LINEAGE_FILE
from ego_assets.releases.build import build_release, read_manifest, versions
from ego_assets.releases.manifest import diff_manifests
from ego_assets.releases.select import SelectionError, select_episodes
from ego_assets.releases.spec import SpecError, assign_split, load_spec, parse_spec
from ego_assets.storage import Storage
from ego_assets.synth import synthesize
from ego_assets_tests.other_venvs import ROBOMIMIC_PYTHON, lerobot_python, run_recipe, venv_env

CAPTURES = {  # key -> (kind, faults)
    "rel-xr-a": ("webxr", ()),
    "rel-xr-b": ("webxr", ()),
    "rel-vp": ("holos-visionpro", ()),
    "rel-bad": ("webxr", ("hand_never_seen",)),
}
OPTIONS = EgoSmithOptions(shard_bytes=300_000)
WEBXR_ONLY = """
[release]
licence = "CC-BY-4.0"
formats = ["webdataset", "robomimic", "lerobot"]
[select]
source_kinds = ["webxr"]
[split]
by = "episode"
seed = 3
fractions = { train = 0.5, valid = 0.5 }
"""


@pytest.fixture(scope="module")
def built_root(tmp_path_factory) -> Path:
    return make_release_root(tmp_path_factory.mktemp("release-root"))


def make_release_root(root: Path, captures: dict | None = None) -> Path:
    """``captures`` (default `CAPTURES`) carried through the pipeline, exported and
    cataloged below ``root``."""
    storage = Storage(root)
    for index, (key, (kind, faults)) in enumerate((captures or CAPTURES).items()):
        synthesize(
            kind, root / "landing" / key, seconds=2, seed=index, faults=faults, capture_id=key
        )
        carry_through(storage, key, episode_index=40 + index)
    _build_catalog(storage)
    return root


def carry_through(storage: Storage, key: str, episode_index: int) -> None:
    """A landed capture to its trajectory, quality report, gate and (if it passes) its
    three exports."""
    pipeline.ingest_raw(storage, key)
    pipeline.normalize(storage, key)
    pipeline.assess_quality(storage, key)
    gate = pipeline.stored_gate(storage, key)
    assert gate is not None
    if gate.passed:
        for exporter in (EgoSmithExporter(OPTIONS), HolosExporter(), CeresExporter()):
            export_capture(
                storage, key, exporter, episode_index=episode_index, gate_version=gate.data_version
            )


def _build_catalog(storage: Storage) -> None:
    with catalog_database(storage, write=True) as db:
        stage_rows(storage, db, {"egosmith_shards": "egosmith-1"})
        run_dbt(["run", "--quiet"], db)


@pytest.fixture
def root(built_root, tmp_path) -> Path:
    copy = tmp_path / "data"
    shutil.copytree(built_root, copy)
    return copy


def _write_spec(root: Path, name: str, text: str) -> Path:
    path = root / "releases" / f"{name}.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


# -- the spec ---------------------------------------------------------------------------


def test_spec_parses_every_key(tmp_path):
    path = tmp_path / "bracket.toml"
    path.write_text(
        """
[release]
licence = "CC-BY-4.0"
description = "bracket"
formats = ["webdataset", "robomimic"]
[select]
tasks = ["bracket assembly"]
source_kinds = ["holos-visionpro", "quest"]
devices = ["Apple Vision Pro"]
demonstrators = ["d01"]
captured_from = 2026-03-01
captured_to = 2026-06-30
quality = ["pass", "warn"]
gate = ["allowed", "blocked"]
waived = true
source_datasets = ["egodex"]
where = "duration_s > 10"
[split]
by = "demonstrator"
seed = 7
fractions = { train = 0.8, valid = 0.1, test = 0.1 }
"""
    )
    spec = load_spec(path)
    assert spec.name == "bracket" and spec.licence == "CC-BY-4.0"
    assert spec.formats == ("webdataset", "robomimic")
    assert spec.export_names() == ("egosmith_shards", "holos_hdf5")
    sel = spec.selection
    assert sel.lists["task"] == ("bracket assembly",)
    assert sel.lists["source_kind"] == ("holos-visionpro", "quest")
    assert sel.lists["quality_status"] == ("pass", "warn")
    assert sel.lists["gate"] == ("allowed", "blocked")
    assert str(sel.captured_from) == "2026-03-01" and str(sel.captured_to) == "2026-06-30"
    assert sel.waived is True and sel.where == "duration_s > 10"
    assert spec.split.by == "demonstrator" and spec.split.seed == 7
    assert spec.split.fractions == (("train", 0.8), ("valid", 0.1), ("test", 0.1))
    assert spec.to_json()["select"]["captured_from"] == "2026-03-01"


def test_spec_defaults_to_allowed_episodes_and_a_90_10_split():
    spec = parse_spec({"release": {"licence": "MIT"}}, "small")
    assert spec.selection.lists == {"gate": ("allowed",)}
    assert spec.split.fractions == (("train", 0.9), ("valid", 0.1))
    assert spec.formats == ("webdataset",)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"release": {"licence": "MIT"}, "select": {"taks": ["x"]}}, "select.taks: unknown key"),
        ({"release": {"licence": "MIT"}, "extra": {}}, "extra: unknown key"),
        ({"release": {}}, "release.licence: required"),
        ({"release": {"licence": "MIT", "formats": ["parquet"]}}, "release.formats"),
        ({"release": {"licence": "MIT"}, "select": {"quality": ["good"]}}, "select.quality"),
        ({"release": {"licence": "MIT"}, "select": {"tasks": []}}, "select.tasks: an empty"),
        ({"release": {"licence": "MIT"}, "select": {"waived": "yes"}}, "select.waived"),
        ({"release": {"licence": "MIT"}, "select": {"captured_from": "2026"}}, "captured_from"),
        ({"release": {"licence": "MIT"}, "select": {"where": "1=1; drop"}}, "select.where"),
        ({"release": {"licence": "MIT"}, "split": {"by": "device"}}, "split.by"),
        ({"release": {"licence": "MIT"}, "split": {"seed": -1}}, "split.seed"),
        (
            {"release": {"licence": "MIT"}, "split": {"fractions": {"train": 0.8, "val": 0.1}}},
            "split.fractions: fractions sum to 0.9",
        ),
        (
            {"release": {"licence": "MIT"}, "split": {"fractions": {"Train": 1.0}}},
            "split.fractions.Train",
        ),
    ],
)
def test_spec_refuses_unknown_keys_and_bad_values(data, message):
    with pytest.raises(SpecError, match=message.replace(".", r"\.").replace("(", r"\(")):
        parse_spec(data, "r1", where="r1.toml")


def test_spec_file_errors_name_the_file(tmp_path):
    with pytest.raises(SpecError, match="no such file"):
        load_spec(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[release\n")
    with pytest.raises(SpecError, match=f"{bad}: not TOML"):
        load_spec(bad)


def test_split_depends_only_on_seed_and_group_key():
    rule = parse_spec(
        {"release": {"licence": "MIT"}, "split": {"seed": 5, "fractions": {"a": 0.7, "b": 0.3}}},
        "r",
    ).split
    keys = [f"cap-{i:05d}" for i in range(20_000)]
    first = {k: assign_split(rule, k) for k in keys[:100]}
    grown = {k: assign_split(rule, k) for k in keys}  # the release grows: same answers
    assert all(grown[k] == first[k] for k in first)
    share = sum(v == "a" for v in grown.values()) / len(grown)
    assert 0.69 < share < 0.71
    other_seed = parse_spec(
        {"release": {"licence": "MIT"}, "split": {"seed": 6, "fractions": {"a": 0.7, "b": 0.3}}},
        "r",
    ).split
    moved = sum(assign_split(other_seed, k) != grown[k] for k in keys)
    assert 0.35 * len(keys) < moved < 0.49 * len(keys)  # 2 * 0.7 * 0.3 = 0.42 expected
    assert assign_split(rule, None) == assign_split(rule, "(none)")


# -- selection ---------------------------------------------------------------------------


def test_selection_returns_exported_episodes_with_lineage(built_root):
    spec = parse_spec({"release": {"licence": "MIT"}, "select": {"source_kinds": ["webxr"]}}, "xr")
    with catalog_database(Storage(built_root), write=False) as db:
        result = select_episodes(db, spec)
    assert [e.capture_key for e in result.episodes] == ["rel-xr-a", "rel-xr-b"]  # bad: blocked
    episode = result.episodes[0]
    lineage = json.loads((built_root / "trajectory" / "rel-xr-a" / LINEAGE_FILE).read_text())
    assert episode.trajectory_digest == lineage["data_version"] is not None
    assert episode.source_kind == "webxr" and episode.demonstrator == "demo-007"
    export = episode.exports["egosmith_shards"]
    assert export["path"] == "exports/egosmith/rel-xr-a"
    assert export["code_version"] == "egosmith-1"
    receipt = json.loads((built_root / "receipts/egosmith_shards/rel-xr-a.json").read_text())
    assert (export["sha256"], export["bytes"]) == (receipt["sha256"], receipt["bytes"])
    gate = pipeline.stored_gate(Storage(built_root), "rel-xr-a")
    assert gate is not None
    assert episode.gate["decision"] == "allowed"
    assert episode.gate["data_version"] == gate.data_version
    assert episode.gate["waivers"] == [] and episode.gate["waived"] is False


def test_selection_filters_where_and_reports_left_out(built_root):
    with catalog_database(Storage(built_root), write=False) as db:
        every = select_episodes(
            db,
            parse_spec(
                {"release": {"licence": "MIT"}, "select": {"gate": ["allowed", "blocked"]}}, "e"
            ),
        )
        where = select_episodes(
            db,
            parse_spec(
                {
                    "release": {"licence": "MIT"},
                    "select": {"where": "capture_key like '%-b' or source_kind <> 'webxr'"},
                },
                "w",
            ),
        )
        with pytest.raises(SelectionError, match=r"select\.where: .*no_such_column"):
            select_episodes(
                db,
                parse_spec(
                    {"release": {"licence": "MIT"}, "select": {"where": "no_such_column > 1"}}, "w"
                ),
            )
    assert [e.capture_key for e in every.episodes] == ["rel-vp", "rel-xr-a", "rel-xr-b"]
    assert every.left_out == [{"capture_key": "rel-bad", "reason": "egosmith_shards: blocked"}]
    assert [e.capture_key for e in where.episodes] == ["rel-vp", "rel-xr-b"]


# -- build, versions, diff ----------------------------------------------------------------


def test_build_writes_manifest_and_webdataset_then_nothing_when_unchanged(root):
    _write_spec(root, "xr", WEBXR_ONLY)
    first = build_release(root, "xr", shard_bytes=250_000)
    assert first.written and first.version == 1
    folder = root / "releases" / "xr" / "v1"
    manifest = json.loads((folder / "release.json").read_text())
    assert manifest["licence"] == "CC-BY-4.0" and manifest["version"] == 1
    keys = [e["capture_key"] for e in manifest["episodes"]]
    assert keys == ["rel-xr-a", "rel-xr-b"]
    splits = {e["capture_key"]: e["split"] for e in manifest["episodes"]}
    # every file listed with its true size and digest, and nothing else on disk
    on_disk = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
    assert sorted([f["path"] for f in manifest["files"]] + ["release.json"]) == on_disk
    for f in manifest["files"]:
        assert f["bytes"] == (folder / f["path"]).stat().st_size
        assert f["sha256"] == file_sha256(folder / f["path"])

    # the shards hold every sample of every episode, byte for byte, in their split
    index = json.loads((folder / "webdataset" / "index.json").read_text())
    storage = Storage(root)
    expected = {k: stored_episode(storage, k).samples for k in keys}  # type: ignore[union-attr]
    assert index["samples"] == sum(expected.values())
    for split in ("train", "valid"):
        urls = [str(folder / "webdataset" / p) for p in index["splits"][split]["shards"]]
        samples = list(wds.WebDataset(urls, shardshuffle=False, empty_check=False)) if urls else []
        want = sum(n for k, n in expected.items() if splits[k] == split)
        assert len(samples) == index["splits"][split]["samples"] == want
        for sample in samples:
            capture = json.loads(sample["meta.json"])["capture_id"]
            assert splits[capture] == split
    # offsets point at each sample's first tar header
    for shard in index["shards"]:
        data = (folder / "webdataset" / shard["path"]).read_bytes()
        assert len(data) == shard["bytes"] and len(shard["offsets"]) == shard["samples"]
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            first_members = {}
            for info in tar.getmembers():
                first_members.setdefault(info.name.split(".")[0], info.offset)
        assert sorted(first_members.values()) == shard["offsets"]
    # one episode's JPEG is the per-episode export's bytes
    xr_a = next(
        s
        for s in wds.WebDataset(
            [str(folder / "webdataset" / p) for p in index["splits"][splits["rel-xr-a"]]["shards"]],
            shardshuffle=False,
            empty_check=False,
        )
        if json.loads(s["meta.json"])["capture_id"] == "rel-xr-a"
    )
    source = Path(episode_path(storage, "rel-xr-a").path) / "shard-000000.tar"
    with tarfile.open(source) as tar:
        jpg = next(m for m in tar.getmembers() if m.name.endswith(".image.jpg"))
        assert tar.extractfile(jpg).read() == xr_a["image.jpg"]  # type: ignore[union-attr]

    again = build_release(root, "xr", shard_bytes=250_000)
    assert (again.written, again.version) == (False, 1)
    assert versions(root, "xr") == [1]


def test_rebuild_from_same_inputs_is_byte_identical(root):
    _write_spec(root, "xr", WEBXR_ONLY)
    build_release(root, "xr", shard_bytes=250_000)
    folder = root / "releases" / "xr" / "v1"
    before = {p.relative_to(folder): p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    shutil.move(folder, root / "v1-kept")
    rebuilt = build_release(root, "xr", shard_bytes=250_000)
    assert rebuilt.written and rebuilt.version == 1
    after = {p.relative_to(folder): p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    assert after == before


def test_any_change_makes_a_new_version_and_diff_says_why(root, capsys):
    _write_spec(root, "xr", WEBXR_ONLY)
    assert build_release(root, "xr").version == 1
    # the spec grows to Vision Pro too: v2 adds rel-vp; the WebXR episodes keep their split
    _write_spec(root, "xr", WEBXR_ONLY.replace('["webxr"]', '["webxr", "holos-visionpro"]'))
    second = build_release(root, "xr")
    assert (second.written, second.version) == (True, 2)
    v1, v2 = read_manifest(root, "xr", "v1"), read_manifest(root, "xr", 2)
    split1 = {e["capture_key"]: e["split"] for e in v1["episodes"]}
    split2 = {e["capture_key"]: e["split"] for e in v2["episodes"]}
    assert {k: split2[k] for k in split1} == split1
    diff = diff_manifests(v1, v2)
    assert [a["capture_key"] for a in diff["added"]] == ["rel-vp"]
    assert diff["removed"] == [] and diff["changed"] == []

    # rel-xr-b re-exported by a new exporter code version -> v3, changed with why
    storage = Storage(root)
    receipt_path = root / "receipts" / "egosmith_shards" / "rel-xr-b.json"
    receipt = json.loads(receipt_path.read_text())
    receipt["code_version"] = "egosmith-2"
    receipt_path.write_text(json.dumps(receipt))
    # and rel-xr-a's export is removed: left out of v3 with the reason
    (root / "receipts" / "egosmith_shards" / "rel-xr-a.json").unlink()
    with catalog_database(storage, write=True) as db:
        stage_rows(storage, db, {"egosmith_shards": "egosmith-2"})
        run_dbt(["run", "--quiet"], db)
    third = build_release(root, "xr")
    assert third.version == 3
    assert main(["release", "diff", "xr", "v2", "v3", "--data", str(root)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "release xr v2 -> v3: 0 added, 2 removed, 1 changed"
    # with egosmith-2 deployed, rel-vp's egosmith-1 export is stale (left out)
    v3 = read_manifest(root, "xr", 3)
    assert [e["capture_key"] for e in v3["episodes"]] == ["rel-xr-b"]
    assert v3["episodes"][0]["exports"]["egosmith_shards"]["code_version"] == "egosmith-2"
    assert {e["capture_key"]: e["reason"] for e in v3["left_out"]} == {
        "rel-vp": "egosmith_shards: stale",
        "rel-xr-a": "egosmith_shards: missing",
    }
    assert out[1:] == [
        f"- rel-vp [{split2['rel-vp']}]: left out: egosmith_shards: stale",
        f"- rel-xr-a [{split2['rel-xr-a']}]: left out: egosmith_shards: missing",
        f"~ rel-xr-b [{split2['rel-xr-b']}]: "
        "egosmith_shards re-exported: code egosmith-1 -> egosmith-2",
    ]
    changed = diff_manifests(v2, v3)
    assert changed["changed"] == [
        {
            "capture_key": "rel-xr-b",
            "split": split2["rel-xr-b"],
            "why": ["egosmith_shards re-exported: code egosmith-1 -> egosmith-2"],
        }
    ]


ONLY_KEYS = """
[release]
licence = "CC-BY-4.0"
formats = ["webdataset", "robomimic", "lerobot"]
[select]
where = "capture_key in (KEYS)"
[split]
fractions = { train = 1.0 }
"""


def _files(folder: Path) -> dict[str, os.stat_result]:
    return {p.relative_to(folder).as_posix(): p.stat() for p in folder.rglob("*") if p.is_file()}


def test_new_version_links_unchanged_parts_and_writes_appended_episodes_anew(root, capsys):
    _write_spec(root, "grow", ONLY_KEYS.replace("KEYS", "'rel-xr-a'"))
    first = build_release(root, "grow")
    _write_spec(root, "grow", ONLY_KEYS.replace("KEYS", "'rel-xr-a', 'rel-xr-b'"))
    second = build_release(root, "grow")
    assert second.version == 2
    assert second.manifest["parts"] == [
        {"name": "v1", "episodes": ["rel-xr-a"]},
        {"name": "v2", "episodes": ["rel-xr-b"]},
    ]
    v1, v2 = _files(first.path), _files(second.path)
    linked = sorted(p for p, st in v2.items() if p in v1 and v1[p].st_ino == st.st_ino)
    video = f"lerobot/train/videos/{CAMERA_KEY}/chunk-000"
    assert linked == sorted(
        [p for p in v1 if p.startswith("webdataset/train/v1/")]
        + ["robomimic/episodes/rel-xr-a.hdf5", "lerobot/train/data/chunk-000/file-000.parquet"]
        + [f"{video}/file-000.mp4", "lerobot/train/ceres/episodes/episode-000040.json"]
    )
    # rel-xr-b landed in files of its own: new shards, a new part file, new data and video
    assert "robomimic/episodes/rel-xr-b.hdf5" in v2 and f"{video}/file-001.mp4" in v2
    assert any(p.startswith("webdataset/train/v2/") for p in v2)
    episodes = pq.read_table(
        second.path / "lerobot/train/meta/episodes/chunk-000/file-000.parquet"
    ).to_pylist()
    assert [(e["data/file_index"], e[f"videos/{CAMERA_KEY}/file_index"]) for e in episodes] == [
        (0, 0),
        (1, 1),
    ]
    assert episodes[1][f"videos/{CAMERA_KEY}/from_timestamp"] == 0.0
    appended = {p for p in v2 if p.startswith("webdataset/train/v2/")} | {
        "robomimic/episodes/rel-xr-b.hdf5",  # a link to its export, not written either
        f"{video}/file-001.mp4",
        "lerobot/train/data/chunk-000/file-001.parquet",
    }
    rewritten = {p: v2[p].st_size for p in v2.keys() - appended - set(linked)}
    assert max(rewritten.values()) < 128_000, rewritten  # indexes, metadata, the card
    # the manifest's digests of linked files are v1's, and true
    for f in second.manifest["files"]:
        assert f["sha256"] == file_sha256(second.path / f["path"])
    # demo_1 of v2 is rel-xr-b's, read through the link
    with h5py.File(second.path / "robomimic/release.hdf5") as f:
        assert f["ego/capture_keys"][:].tolist() == [b"rel-xr-a", b"rel-xr-b"]
        assert f["data"].get("demo_1", getlink=True).filename == "episodes/rel-xr-b.hdf5"
        assert f["data/demo_1"].attrs["num_samples"] > 0

    # the spec and the catalog move on (v3, the catalog rebuilt);
    # v2 is packed again from its manifest alone, byte for byte
    _write_spec(root, "grow", ONLY_KEYS.replace("KEYS", "'rel-xr-b'"))
    assert build_release(root, "grow").version == 3
    _build_catalog(Storage(root))  # the catalog rebuilt since: not read by a rebuild
    out = root.parent / "v2-again"
    assert main(["release", "rebuild", "grow", "v2", "--out", str(out), "--data", str(root)]) == 0
    assert capsys.readouterr().out.startswith(f"release grow v2 rebuilt at {out}: ")
    assert {p: (out / p).read_bytes() for p in _files(out)} == {
        p: (second.path / p).read_bytes() for p in v2
    }
    # a missing version comes back in its own folder; a changed export is refused, by name
    shutil.move(second.path, root.parent / "v2-moved")
    assert main(["release", "rebuild", "grow", "v2", "--data", str(root)]) == 2
    assert "no version v2" in capsys.readouterr().err
    shutil.move(root.parent / "v2-moved", second.path)
    assert main(["release", "rebuild", "grow", "v2", "--data", str(root)]) == 2
    assert "exists; give --out a new folder" in capsys.readouterr().err
    # an export is re-written as exporters write: a new file renamed into place
    changed = root / "changed.h5"
    shutil.copyfile(_holos_file(root, "rel-xr-b"), changed)
    with h5py.File(changed, "a") as f:
        f["data"].attrs["note"] = "touched"
    os.replace(changed, _holos_file(root, "rel-xr-b"))
    assert (
        main(
            [
                "release",
                "rebuild",
                "grow",
                "v2",
                "--out",
                str(root.parent / "x"),
                "--data",
                str(root),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert "capture rel-xr-b: holos_hdf5: " in err and "changed since the release" in err
    assert not (root.parent / "x").exists()


def test_cli_build_and_refusals(root, capsys):
    _write_spec(root, "xr", WEBXR_ONLY)
    assert main(["release", "build", "xr", "--data", str(root)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"release xr v1 (written): {root / 'releases' / 'xr' / 'v1'}")
    assert main(["release", "build", "xr", "--data", str(root)]) == 0
    assert "v1 (unchanged, nothing written)" in capsys.readouterr().out

    spec = _write_spec(root, "none", WEBXR_ONLY.replace('["webxr"]', '["quest"]'))
    assert main(["release", "build", "none", "--data", str(root), "--spec", str(spec)]) == 2
    assert "selects no exported episode" in capsys.readouterr().err
    _write_spec(root, "typo", WEBXR_ONLY.replace("source_kinds", "source_kind"))
    assert main(["release", "build", "typo", "--data", str(root)]) == 2
    assert "select.source_kind: unknown key" in capsys.readouterr().err
    _write_spec(root, "hdf", WEBXR_ONLY.replace('"robomimic"', '"parquet"'))
    assert main(["release", "build", "hdf", "--data", str(root)]) == 2
    assert (
        "release.formats: ['webdataset', 'parquet', 'lerobot']: give distinct formats among "
        "['lerobot', 'robomimic', 'webdataset']"
    ) in capsys.readouterr().err
    assert main(["release", "diff", "xr", "v1", "v7", "--data", str(root)]) == 2
    assert "no version v7 (versions: v1)" in capsys.readouterr().err
    assert sorted(p.name for p in (root / "releases").iterdir()) == [  # nothing else written
        "hdf.toml",
        "none.toml",
        "typo.toml",
        "xr",
        "xr.toml",
    ]


# -- robomimic-style HDF5 ----------------------------------------------------------------

# robomimic's SequenceDataset over one split (filter_by_attribute); prints JSON.
SPLIT_RECIPE = r"""
import json, sys
import numpy as np
from robomimic.utils.dataset import SequenceDataset

path, split = sys.argv[1], sys.argv[2]
ds = SequenceDataset(
    hdf5_path=path,
    obs_keys=["device_pose"],
    dataset_keys=["actions"],
    seq_length=5,
    filter_by_attribute=split,
)
first = ds[0]
print(json.dumps({
    "demos": list(ds.demos),
    "len": len(ds),
    "actions": np.asarray(first["actions"], dtype=float).tolist(),
}))
"""


def _holos_file(root: Path, key: str) -> Path:
    return root / "exports" / "holos_hdf5" / key / f"{key}.h5"


def test_robomimic_file_holds_each_episode_as_a_demo_with_split_masks(root):
    _write_spec(root, "xr", WEBXR_ONLY)
    result = build_release(root, "xr")
    manifest = result.manifest
    packed = manifest["formats"]["robomimic"]
    assert packed["demos"] == {"rel-xr-a": "demo_0", "rel-xr-b": "demo_1"}
    splits = {e["capture_key"]: e["split"] for e in manifest["episodes"]}
    with h5py.File(result.path / "robomimic" / "release.hdf5") as f:
        total = 0
        for key, demo in packed["demos"].items():
            with h5py.File(_holos_file(root, key)) as src:
                source = src["data/demo_0"]
                copied = f[f"data/{demo}"]
                assert f["ego/capture_keys"][int(demo[5:])].decode() == key
                np.testing.assert_array_equal(copied["actions"][:], source["actions"][:])
                np.testing.assert_array_equal(
                    copied["obs/device_pose"][:], source["obs/device_pose"][:]
                )
                assert copied.attrs["num_samples"] == source.attrs["num_samples"]
                total += int(source.attrs["num_samples"])
                # an external link to the episode's export, hard-linked: the same bytes
                link = f["data"].get(demo, getlink=True)
                assert (link.filename, link.path) == (f"episodes/{key}.hdf5", "/data/demo_0")
                linked = result.path / "robomimic" / link.filename
                assert linked.stat().st_ino == _holos_file(root, key).stat().st_ino
                axes = [[s.name for s in dim.values()] for dim in copied["obs/device_pose"].dims]
                assert axes[0] == ["/data/demo_0/time"]
                assert (
                    copied.file[axes[1][0]][:].tolist()
                    == src[source["obs/device_pose"].dims[1][0].name][:].tolist()
                )
        assert f["data"].attrs["total"] == total == packed["total"]
        for split in ("train", "valid"):
            want = [packed["demos"][k] for k in sorted(splits) if splits[k] == split]
            assert [n.decode() for n in f[f"mask/{split}"][:]] == want


@pytest.mark.skipif(
    not ROBOMIMIC_PYTHON.exists(), reason="no robomimic virtualenv (make robomimic-venv)"
)
def test_robomimic_sequence_dataset_reads_each_split(root, tmp_path):
    _write_spec(root, "xr", WEBXR_ONLY)
    result = build_release(root, "xr")
    path = result.path / "robomimic" / "release.hdf5"
    demos = result.manifest["formats"]["robomimic"]["demos"]
    for split in ("train", "valid"):
        keys = [e["capture_key"] for e in result.manifest["episodes"] if e["split"] == split]
        if not keys:
            continue
        line = run_recipe(
            ROBOMIMIC_PYTHON,
            ["-c", SPLIT_RECIPE, str(path), split],
            cwd=tmp_path,
            env=venv_env(),
            timeout_s=600,
        )
        got = json.loads(line)
        assert got["demos"] == [demos[k] for k in keys]
        samples = 0
        for key in keys:
            with h5py.File(_holos_file(root, key)) as src:
                samples += int(src["data/demo_0"].attrs["num_samples"])
                if key == keys[0]:
                    first_actions = src["data/demo_0/actions"][:5]
        assert got["len"] == samples  # one sequence per sample
        np.testing.assert_allclose(np.asarray(got["actions"]), first_actions, rtol=1e-6)


# -- packed LeRobot v3 ------------------------------------------------------------------

# LeRobotDataset over the episodes given (``episodes=`` filtering); prints JSON.
LEROBOT_RECIPE = r"""
import json, sys
from lerobot.datasets.lerobot_dataset import LeRobotDataset

root, episodes = sys.argv[1], json.loads(sys.argv[2])
ds = LeRobotDataset("release/xr", root=root, episodes=episodes, video_backend="torchcodec")
fps = ds.fps
windowed = LeRobotDataset(
    "release/xr", root=root, episodes=episodes, video_backend="torchcodec",
    delta_timestamps={"action": [0.0, 1 / fps]},
)
items = [ds[i] for i in range(len(ds))]
print(json.dumps({
    "len": len(ds),
    "num_episodes": ds.num_episodes,
    "episode_index": sorted({int(i["episode_index"]) for i in items}),
    "state0": items[0]["observation.state"].numpy().tolist(),
    "last_action_is_pad": windowed[len(ds) - 1]["action_is_pad"].numpy().tolist(),
}))
"""


def test_lerobot_is_one_packed_dataset_per_split(root, tmp_path):
    _write_spec(root, "xr", WEBXR_ONLY.replace("train = 0.5, valid = 0.5", "train = 1.0"))
    result = build_release(root, "xr")
    packed = result.manifest["formats"]["lerobot"]
    keys = ["rel-xr-a", "rel-xr-b"]
    assert packed["episodes"] == {"rel-xr-a": 0, "rel-xr-b": 1}  # the part's order
    assert packed["excluded"] == []
    assert packed["datasets"] == {"train": {"root": "lerobot/train", "episodes": 2}}
    dataset = result.path / "lerobot" / "train"
    info = json.loads((dataset / "meta" / "info.json").read_text())
    assert info["total_episodes"] == 2 and info["splits"] == {"train": "0:2"}
    rows = pq.read_table(dataset / "data" / "chunk-000" / "file-000.parquet")
    episodes = pq.read_table(
        dataset / "meta" / "episodes" / "chunk-000" / "file-000.parquet"
    ).to_pylist()
    records = {e["capture_key"]: e for e in result.manifest["episodes"]}
    for key in keys:
        index = packed["episodes"][key]
        shard = root / records[key]["exports"]["ceres_episode"]["path"]
        source = pq.read_table(next(shard.glob("data/*/*.parquet")))
        meta = episodes[index]
        start, end = meta["dataset_from_index"], meta["dataset_to_index"]
        assert end - start == source.num_rows == meta["length"]
        merged = rows.slice(start, end - start)
        assert (
            merged.column("observation.state").to_pylist()
            == source.column("observation.state").to_pylist()
        )
        assert set(merged.column("episode_index").to_pylist()) == {index}
    total = sum(e["length"] for e in episodes)
    assert info["total_frames"] == total == rows.num_rows

    python = lerobot_python()
    if python is None:
        pytest.skip("no lerobot environment (make lerobot-env)")
    chosen = [1]
    line = run_recipe(
        python,
        ["-c", LEROBOT_RECIPE, str(dataset), json.dumps(chosen)],
        cwd=tmp_path,
        env=venv_env(hf_home=tmp_path),
        timeout_s=900,
    )
    got = json.loads(line)
    assert got["len"] == episodes[1]["length"] and got["num_episodes"] == 1
    assert got["episode_index"] == chosen
    first = rows.column("observation.state")[episodes[1]["dataset_from_index"]]
    np.testing.assert_allclose(got["state0"], first.as_py(), rtol=1e-6)
    assert got["last_action_is_pad"] == [False, True]  # the window runs past the episode


# -- dataset card -------------------------------------------------------------------------


def test_dataset_card_front_matter_and_tables(root):
    _write_spec(root, "xr", WEBXR_ONLY)
    result = build_release(root, "xr")
    text = (result.path / "README.md").read_text()
    assert text.startswith("---\n")
    front = yaml.safe_load(text.split("---\n")[1])
    assert front["license"] == "cc-by-4.0"
    assert front["size_categories"] == ["n<1K"]
    assert front["task_categories"] == ["robotics"]
    assert front["pretty_name"] == "xr v1"
    assert {"lerobot", "robomimic", "webdataset"} <= set(front["tags"])
    episodes = result.manifest["episodes"]
    hours = sum(e["duration_s"] for e in episodes) / 3600
    assert f"2 episodes, {hours:.3f} hours. Licence: CC-BY-4.0." in text
    assert f"| demo-007 | 2 | {hours:.3f} |" in text  # both WebXR takes: one demonstrator
    for split in ("train", "valid"):
        n = sum(e["split"] == split for e in episodes)
        if n:
            s = sum(e["duration_s"] for e in episodes if e["split"] == split) / 3600
            assert f"| {split} | {n} | {s:.3f} |" in text
    verdicts = [e["gate"]["quality"] for e in episodes]
    assert set(verdicts) <= {"pass", "warn"}
    for verdict in set(verdicts):
        assert f"| {verdict} | {verdicts.count(verdict)} |" in text
    assert "Episodes let through by a waiver: 0." in text
    card = next(f for f in result.manifest["files"] if f["path"] == "README.md")
    assert card["sha256"] == file_sha256(result.path / "README.md")


def test_card_licence_that_is_not_an_identifier_is_other():
    from ego_assets.releases.card import front_matter, size_category

    manifest = {
        "licence": "internal use only",
        "episodes": [],
        "formats": {},
        "release": "r",
        "version": 2,
    }
    front = front_matter(manifest)
    assert (front["license"], front["license_name"]) == ("other", "internal use only")
    assert [size_category(n) for n in (0, 999, 1000, 99_999, 2_000_000)] == [
        "n<1K",
        "n<1K",
        "1K<n<10K",
        "10K<n<100K",
        "n>1M",
    ]


# -- consent withdrawal and the catalog's releases -------------------------------------

BOTH_KINDS = WEBXR_ONLY.replace('["webxr"]', '["webxr", "holos-visionpro"]')
WITHDRAWN = ("rel-bad", "rel-xr-a", "rel-xr-b")  # every WebXR capture is demo-007's


def _catalog_rows(root: Path, sql: str) -> list[tuple]:
    with catalog_database(Storage(root), write=False) as db:
        import duckdb

        with duckdb.connect(str(db), read_only=True) as con:
            return con.execute(sql).fetchall()


def _tree(folder: Path) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()
    }


def test_withdraw_records_quarantines_and_later_versions_leave_the_episodes_out(root, capsys):
    _write_spec(root, "all", BOTH_KINDS)
    v1 = build_release(root, "all")
    held = [e["capture_key"] for e in v1.manifest["episodes"]]
    assert held == ["rel-vp", "rel-xr-a", "rel-xr-b"]
    splits = {e["capture_key"]: e["split"] for e in v1.manifest["episodes"]}

    # an unknown demonstrator is refused before anything is written
    before = sorted(p.relative_to(root).as_posix() for p in root.rglob("*"))
    assert main(["withdraw", "--demonstrator", "demo-999", "--reason", "x", "--data", str(root)])
    err = capsys.readouterr().err
    assert err.startswith("error: unknown demonstrator 'demo-999'") and "demo-007" in err
    assert main(["withdraw", "--demonstrator", "demo-007", "--reason", " ", "--data", str(root)])
    assert "--reason: required" in capsys.readouterr().err
    assert sorted(p.relative_to(root).as_posix() for p in root.rglob("*")) == before

    raw_a = _tree(root / "raw" / "rel-xr-a")
    egosmith_a = _tree(root / "exports" / "egosmith" / "rel-xr-a")
    rc = main(
        [
            "withdraw", "--demonstrator", "demo-007", "--reason", "asked by email",
            "--by", "ops-anna", "--data", str(root), "--no-catalog",
        ]
    )  # fmt: skip
    assert rc == 0
    out = capsys.readouterr().out
    assert "3 captures, " in out
    records = sorted((root / "consent" / "withdrawals").iterdir())
    assert len(records) == 1 and records[0].name.endswith("-demo-007.json")
    record = json.loads(records[0].read_text())
    assert record["demonstrator"] == "demo-007" and record["by"] == "ops-anna"
    assert record["reason"] == "asked by email"
    assert record["capture_keys"] == list(WITHDRAWN)
    date = record["withdrawn_at"][:10]

    # quarantined: out of every stage the platform reads, bytes kept as they were
    for key in WITHDRAWN:
        for stage in ("landing", "raw", "trajectory", "quality"):
            assert not (root / stage / key).exists()
            assert (root / "quarantine" / key / stage).is_dir()
    for key in ("rel-xr-a", "rel-xr-b"):  # rel-bad was blocked: never exported
        for fmt in ("egosmith_shards", "holos_hdf5", "ceres_episode"):
            assert not (root / "receipts" / fmt / f"{key}.json").exists()
            assert (root / "quarantine" / key / "receipts" / fmt / f"{key}.json").is_file()
    assert _tree(root / "quarantine" / "rel-xr-a" / "raw" / "rel-xr-a") == raw_a
    assert _tree(root / "quarantine" / "rel-xr-a" / "exports" / "egosmith" / "rel-xr-a") == (
        egosmith_a
    )
    assert (root / "raw" / "rel-vp").is_dir()
    # the packed datasets' inputs no longer include them
    from ego_assets.exports.ceres import current_shards
    from ego_assets.exports.egosmith import finished_episodes

    assert [s.key for s in current_shards(Storage(root))] == ["rel-vp"]
    assert [s.capture_id for s in finished_episodes(Storage(root))] == ["rel-vp"]
    # uploaded again: never ingested again
    landed = root / "quarantine" / "rel-xr-a" / "landing" / "rel-xr-a"
    shutil.copytree(landed, root / "landing" / "rel-xr-a")
    with pytest.raises(ValueError, match=r"capture rel-xr-a: quarantined \(quarantine/rel-xr-a/"):
        pipeline.ingest_raw(Storage(root), "rel-xr-a")
    assert not (root / "raw" / "rel-xr-a").exists()
    shutil.rmtree(root / "landing" / "rel-xr-a")

    # a build over the catalog as it was (still listing demo-007's episodes) leaves them out
    v2 = build_release(root, "all")
    assert (v2.version, v2.written) == (2, True)
    assert [e["capture_key"] for e in v2.manifest["episodes"]] == ["rel-vp"]
    reason = f"consent withdrawn on {date} (demonstrator demo-007): asked by email"
    assert v2.manifest["left_out"] == [
        {"capture_key": k, "reason": reason, "withdrawal": record["id"]}
        for k in ("rel-xr-a", "rel-xr-b")
    ]
    note = (
        f"2 episodes of demonstrator demo-007 left out: consent withdrawn on {date}, asked by email"
    )
    assert v2.manifest["notes"] == [note]
    assert f"## Notes\n\n- {note}\n" in (v2.path / "README.md").read_text()
    assert main(["release", "diff", "all", "v1", "v2", "--data", str(root)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "release all v1 -> v2: 0 added, 2 removed, 0 changed",
        f"- rel-xr-a [{splits['rel-xr-a']}]: left out: {reason}",
        f"- rel-xr-b [{splits['rel-xr-b']}]: left out: {reason}",
    ]

    # the refreshed catalog no longer lists them; the next build carries the note forward
    _build_catalog(Storage(root))
    assert _catalog_rows(root, "select capture_key from episodes order by 1") == [("rel-vp",)]
    assert main(["release", "build", "all", "--data", str(root)]) == 0
    assert capsys.readouterr().out.splitlines()[-3:] == [
        f"  left out rel-xr-a: {reason}",
        f"  left out rel-xr-b: {reason}",
        f"  note: {note}",
    ]
    assert versions(root, "all") == [1, 2]  # unchanged: nothing new written

    # the catalog: which versions hold which episode, and what still holds demo-007's
    assert _catalog_rows(
        root, "select release_version, capture_key, split from releases order by 1, 2"
    ) == [
        ("all@v1", "rel-vp", splits["rel-vp"]),
        ("all@v1", "rel-xr-a", splits["rel-xr-a"]),
        ("all@v1", "rel-xr-b", splits["rel-xr-b"]),
        ("all@v2", "rel-vp", splits["rel-vp"]),
    ]
    assert _catalog_rows(root, "select capture_key, releases from episodes") == [
        ("rel-vp", "all@v1,all@v2")
    ]
    assert _catalog_rows(
        root,
        "select demonstrator, capture_key, holder_kind, holder, path, reason, withdrawn_by "
        "from withdrawn_holdings order by capture_key",
    ) == [
        ("demo-007", k, "release", "all@v1", "releases/all/v1", "asked by email", "ops-anna")
        for k in ("rel-xr-a", "rel-xr-b")
    ]

    # a second withdrawal is a second record (append-only); the CLI lists the holdings
    assert (
        main(["withdraw", "--demonstrator", "demo-007", "--reason", "again", "--data", str(root)])
        == 0
    )
    out = capsys.readouterr().out.splitlines()
    assert "  3 captures, 0 folders quarantined" in out
    assert out[-3:] == [
        "still holding episodes of demo-007: 2",
        f"  {'release':10} {'all@v1':24} {'rel-xr-a':24} releases/all/v1",
        f"  {'release':10} {'all@v1':24} {'rel-xr-b':24} releases/all/v1",
    ]
    assert len(list((root / "consent" / "withdrawals").iterdir())) == 2
    assert json.loads(records[0].read_text()) == record


# -- the Dagster asset partitioned by release name ---------------------------------------


def test_release_asset_builds_the_partition_and_writes_nothing_new_when_unchanged(root):
    import dagster as dg

    from ego_assets.defs.releases import RELEASES_PARTITIONS_NAME, release, release_specs_sensor
    from ego_assets.defs.resources import StorageResource

    _write_spec(root, "xr", WEBXR_ONLY)
    _write_spec(root, "all", BOTH_KINDS)
    (root / "releases" / "Bad Name.toml").write_text("")  # not a release name: no partition
    resources = {"storage": StorageResource(root=str(root))}
    with dg.instance_for_test() as instance:
        sensed = release_specs_sensor(
            dg.build_sensor_context(instance=instance, resources=resources)
        )
        [request] = sensed.dynamic_partitions_requests
        assert (request.partitions_def_name, list(request.partition_keys)) == (
            RELEASES_PARTITIONS_NAME,
            ["all", "xr"],
        )
        instance.add_dynamic_partitions(RELEASES_PARTITIONS_NAME, ["all", "xr"])
        again = release_specs_sensor(
            dg.build_sensor_context(instance=instance, resources=resources)
        )
        assert not again.dynamic_partitions_requests

        def materialize() -> dict:
            result = dg.materialize(
                [release], partition_key="xr", instance=instance, resources=resources
            )
            assert result.success
            [event] = result.get_asset_materialization_events()
            return {k: v.value for k, v in event.materialization.metadata.items()}

        first = materialize()
        manifest = read_manifest(root, "xr", 1)
        assert (first["version"], first["episodes"], first["written"]) == (1, 2, True)
        assert first["bytes"] == sum(f["bytes"] for f in manifest["files"])
        assert first["bytes"] == sum(
            p.stat().st_size for p in (root / "releases" / "xr" / "v1").rglob("*")
            if p.is_file() and p.name != "release.json"
        )  # fmt: skip
        folder = root / "releases" / "xr"
        before = {p: p.stat().st_mtime_ns for p in folder.rglob("*")}
        second = materialize()
        assert (second["version"], second["written"]) == (1, False)
        assert {p: p.stat().st_mtime_ns for p in folder.rglob("*")} == before
        assert versions(root, "xr") == [1] and versions(root, "all") == []


def test_a_version_built_outside_a_run_is_recorded_as_the_asset_records_it(root):
    """`record_release` (what `make demo` calls, #35): the partition added, one
    materialization with the asset's metadata, data version and code version; nothing
    more for the same version; a new one when a build writes one."""
    import dagster as dg

    from ego_assets.defs.releases import (
        RELEASE_KEY,
        RELEASES_PARTITIONS_NAME,
        record_release,
        release,
    )
    from ego_assets.defs.resources import StorageResource
    from ego_assets.releases.build import RELEASE_WRITER_VERSION

    _write_spec(root, "xr", WEBXR_ONLY)
    resources = {"storage": StorageResource(root=str(root))}

    def recorded(instance: dg.DagsterInstance) -> list[dg.AssetMaterialization]:
        records = instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=RELEASE_KEY, asset_partitions=["xr"]), limit=10
        ).records
        return [r.asset_materialization for r in records if r.asset_materialization]

    def values(event: dg.AssetMaterialization) -> dict:
        return {k: getattr(v, "value", v) for k, v in event.metadata.items()}

    built = build_release(root, "xr")
    with dg.instance_for_test() as instance:
        assert record_release(instance, "xr", built, "a-test")
        assert instance.get_dynamic_partitions(RELEASES_PARTITIONS_NAME) == ["xr"]
        [event] = recorded(instance)
        assert values(event)["version"] == 1 and values(event)["episodes"] == 2
        assert event.tags["dagster/data_version"] == built.manifest["inputs_sha256"]
        assert event.tags["dagster/code_version"] == RELEASE_WRITER_VERSION
        assert event.tags["ego/built_by"] == "a-test"
        # the same version again (nothing written): nothing new recorded
        assert not record_release(instance, "xr", build_release(root, "xr"), "a-test")
        assert len(recorded(instance)) == 1
    with dg.instance_for_test() as instance:  # the asset's own step, for the same version
        instance.add_dynamic_partitions(RELEASES_PARTITIONS_NAME, ["xr"])
        assert dg.materialize([release], partition_key="xr", instance=instance, resources=resources)
        [by_step] = recorded(instance)
    step = values(by_step)
    assert {k: v for k, v in values(event).items() if k != "written"} == {
        k: v for k, v in step.items() if k != "written"
    }
    assert by_step.tags["dagster/data_version"] == event.tags["dagster/data_version"]


def test_episodes_releases_column_follows_new_versions_incrementally(root):
    _write_spec(root, "xr", WEBXR_ONLY)
    build_release(root, "xr")
    storage = Storage(root)
    _build_catalog(storage)
    query = "select capture_key, releases from episodes order by 1"
    assert _catalog_rows(root, query) == [
        ("rel-bad", None),
        ("rel-vp", None),
        ("rel-xr-a", "xr@v1"),
        ("rel-xr-b", "xr@v1"),
    ]
    _write_spec(root, "xr", BOTH_KINDS)
    _write_spec(
        root, "vp", BOTH_KINDS.replace('["webxr", "holos-visionpro"]', '["holos-visionpro"]')
    )
    assert build_release(root, "xr").version == 2
    assert build_release(root, "vp").version == 1
    with catalog_database(storage, write=True) as db:
        summary = stage_rows(storage, db)
        # only the two new manifests are read; their four episodes change membership
        assert (summary.changed["release_versions"], summary.changed["release_episodes"]) == (
            2,
            3,
        )
        run_dbt(["run", "--quiet"], db)
    incremental = _catalog_rows(root, query)
    assert incremental == [
        ("rel-bad", None),
        ("rel-vp", "vp@v1,xr@v2"),
        ("rel-xr-a", "xr@v1,xr@v2"),
        ("rel-xr-b", "xr@v1,xr@v2"),
    ]
    with catalog_database(storage, write=True) as db:
        run_dbt(["run", "--quiet", "--full-refresh"], db)
    assert _catalog_rows(root, query) == incremental
    assert _catalog_rows(
        root,
        "select release_version, count(*), min(release_path) from releases group by 1 order by 1",
    ) == [
        ("vp@v1", 1, "releases/vp/v1"),
        ("xr@v1", 2, "releases/xr/v1"),
        ("xr@v2", 3, "releases/xr/v2"),
    ]
    # nothing new: staging reads no manifest
    with catalog_database(storage, write=True) as db:
        assert stage_rows(storage, db).changed["release_versions"] == 0


def test_the_landing_scan_passes_over_a_quarantined_capture(tmp_path):
    from ego_assets.landing import scan_landing

    for key in ("cap-a", "cap-b", "cap-c"):
        (tmp_path / "landing" / key).mkdir(parents=True)
        (tmp_path / "landing" / key / "ego_capture.json").write_text("{}")
    (tmp_path / "quarantine" / "cap-b" / "raw").mkdir(parents=True)
    scan = scan_landing(Storage(tmp_path), None, limit=10)
    assert (scan.keys, scan.quarantined, scan.rejected) == (("cap-a", "cap-c"), ("cap-b",), ())
    again = scan_landing(Storage(tmp_path), scan.cursor, limit=10)
    assert again.keys == () and again.quarantined == ()  # handed out once, like any other


def test_quarantine_moves_each_folder_once_with_a_landing_zone_elsewhere(tmp_path):
    from ego_assets.releases.consent import quarantine_capture

    root, zone = tmp_path / "data", tmp_path / "zone"
    for folder in (zone / "k1", root / "raw" / "k1", root / "quality" / "k1"):
        folder.mkdir(parents=True)
        (folder / "f.bin").write_bytes(folder.parent.name.encode())
    storage = Storage(root, landing=zone)
    moved = quarantine_capture(storage, "k1")
    q = root.resolve() / "quarantine" / "k1"
    assert [t for _, t in moved] == [q / "landing" / "k1", q / "raw" / "k1", q / "quality" / "k1"]
    assert (q / "landing" / "k1" / "f.bin").read_bytes() == b"zone"
    assert (q / "raw" / "k1" / "f.bin").read_bytes() == b"raw"
    assert not (zone / "k1").exists() and not (root / "raw" / "k1").exists()
    assert quarantine_capture(storage, "k1") == []  # nothing left to move
    (root / "raw" / "k1").mkdir()  # made again (e.g. a run that was in flight)
    assert [t for _, t in quarantine_capture(storage, "k1")] == [q / "raw" / "k1.1"]


def test_withdrawn_holdings_lists_releases_exports_and_trajectories_still_holding(root):
    from ego_assets.releases.consent import record_withdrawal

    _write_spec(root, "xr", WEBXR_ONLY)
    v1 = build_release(root, "xr")
    # recorded but not quarantined yet (say the move was interrupted): everything holds
    record, _ = record_withdrawal(root, "demo-007", "asked by phone", "ops-ben", ["rel-xr-a"])
    _build_catalog(Storage(root))
    rows = _catalog_rows(
        root,
        "select capture_key, holder_kind, holder, path, withdrawal_id from withdrawn_holdings "
        "order by capture_key, holder_kind, holder",
    )
    receipts = {
        (e["capture_key"], fmt): export["path"]
        for e in v1.manifest["episodes"]
        for fmt, export in e["exports"].items()
    }
    want = []
    for key in ("rel-bad", "rel-xr-a", "rel-xr-b"):  # demo-007's captures
        if key != "rel-bad":  # the blocked one was never exported nor released
            want += [
                (key, "export", fmt, receipts[(key, fmt)], record.id)
                for fmt in ("ceres_episode", "egosmith_shards", "holos_hdf5")
            ]
            want.append((key, "release", "xr@v1", "releases/xr/v1", record.id))
        want.append((key, "trajectory", "trajectory", f"trajectory/{key}", record.id))
    assert rows == want
