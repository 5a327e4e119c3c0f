"""What a dataset release costs at scale, and what a new version rewrites.

``python -m bench release [--episodes 10000] [--added 100] [--seconds 2] [--bases 2]
[--work DIR] [--json FILE]``

1. **Exports.** ``--bases`` real WebXR captures of ``--seconds`` are synthesized and
   carried through the pipeline (ingest, normalize, quality gate) and exported by the
   three exporters a release reads (EgoSmith shards, Holos HDF5, CERES LeRobot shard).
   They are then replicated into ``--episodes + --added`` per-episode exports under
   distinct capture keys ``bench-NNNNNN`` at the exporters' own paths
   (``exports/egosmith/<key>/``, ``exports/holos_hdf5/<key>/<key>.h5``,
   ``exports/ceres-lerobot-v3/<key>/shards/episode-NNNNNN/``): every file is a hard link
   to the base's (no disk space, no time), except the CERES shard's
   ``ceres/episode-metadata.json``, written anew (as the exporter writes it) with the
   replica's capture key and episode index (the merge reads them); the shard's data,
   video and episodes files are linked at the names the exporter gives that index. The
   replicas' samples are the base's bytes.
2. **Selection.** The catalog is not built for 10,000 captures: the bench makes the
   selection itself (`SelectionResult`, each episode's split from the spec's seeded rule,
   its exports with path, bytes and SHA-256: the real one of the Holos file, the base's,
   as the robomimic packing takes a linked episode file's digest from it; a per-replica
   stand-in for the folder exports, whose digests nothing packs) and calls
   `build_version`, the build after the catalog query (which is one DuckDB query).
3. **v1**: a release of ``--episodes`` in all three formats (train 0.9 / valid 0.1),
   timed (wall, and CPU of the process and its children); then ``cp -r`` of that version
   folder (the same bytes, the same files) beside it, twice: **cold** (after ``sync`` and
   ``echo 3 > /proc/sys/vm/drop_caches``, so ``cp`` reads the files from the disk; when
   the caches cannot be dropped, ``caches_dropped`` says why) and **warm** (right after
   the cold one: the files it reads are in the page cache, as the build's inputs are).
   ``ratio_vs_cold_copy`` and ``ratio_vs_warm_copy`` = build seconds / copy seconds
   (target: at most 2 against the warm copy); ``ratio_vs_copy`` is against their mean,
   as before. ``sync`` runs before every timed phase (each build and each copy), so no
   phase pays for the write-back of the gigabytes the one before it left dirty.
4. **v2** adds ``--added`` episodes: ``incremental_bytes_ratio`` = bytes of v2's files
   that are not hard links to v1's / v2's bytes (target <= 0.05), also per format.
5. **Unchanged**: the same selection again writes nothing (``unchanged_written`` 0).
6. **Actions**: release ``bench-eef``, the same ``--episodes`` with ``[actions] space =
   "eef_pose_gripper"``, ``frame = "head"`` (every replica's ``trajectory/<key>/`` linked
   from its base's, its ``action_sources.arrow`` with it), built from scratch.
   ``derive_cpu_s``: the CPU seconds the build spent deriving the actions, counted where
   it happens (`derived.derivation_cpu_s`: reading each episode's action sources and
   deriving the state and actions on each packing's clock, in every thread and every
   `run_apart` process); ``actions_share`` = ``derive_cpu_s`` / the build's CPU seconds
   (target <= 0.10 at 10,000 episodes), ``actions_share_of_wall`` = ``derive_cpu_s`` / its
   wall seconds. ``eef_extra_share`` = (its build - v1's build) / its build: what the
   whole declared space costs beside a release of links, writing included (a derived
   release rewrites every LeRobot data file and every WebDataset shard, and gives every
   robomimic demo new datasets).

Figures depend on the machine's load: say ``uptime`` beside them.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import logging
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import name_value_table, report

log = logging.getLogger("bench.release")

# the suite's run leaves the machine's page cache alone
SMOKE_ARGS = ["--episodes", "6", "--added", "2", "--seconds", "2", "--bases", "1", "--keep-caches"]
FORMATS = ("webdataset", "robomimic", "lerobot")
EXPORTS = {  # registry name of each export a release reads -> its exporter
    "egosmith_shards": "egosmith",
    "holos_hdf5": "holos",
    "ceres_episode": "ceres",
}


def _base_exports(root: Path, bases: int, seconds: float) -> list[dict[str, Path]]:
    """Real exports of ``bases`` synthetic WebXR captures: per base, format -> path."""
    from ego_assets import pipeline
    from ego_assets.exports.ceres import CeresExporter
    from ego_assets.exports.egosmith import EgoSmithExporter
    from ego_assets.exports.holos import HolosExporter
    from ego_assets.exports.run import export_capture
    from ego_assets.storage import Storage
    from ego_assets.synth import synthesize

    storage = Storage(root)
    out = []
    for index in range(bases):
        key = f"base-{index}"
        synthesize("webxr", root / "landing" / key, seconds=seconds, seed=index, capture_id=key)
        pipeline.ingest_raw(storage, key)
        pipeline.normalize(storage, key)
        pipeline.assess_quality(storage, key)
        gate = pipeline.stored_gate(storage, key)
        if gate is None or not gate.passed:
            raise RuntimeError(f"base capture {key}: the gate did not pass")
        for exporter in (EgoSmithExporter(), HolosExporter(), CeresExporter()):
            export_capture(
                storage, key, exporter, episode_index=index, gate_version=gate.data_version
            )
        paths = {"trajectory": root / "trajectory" / key}
        for fmt in EXPORTS:
            receipt = json.loads((root / "receipts" / fmt / f"{key}.json").read_text())
            paths[fmt] = root / receipt["path"]
        out.append(paths)
    return out


def _replicate(root: Path, base: dict[str, Path], key: str, index: int) -> dict[str, Any]:
    """Per-episode exports of ``key`` linked from ``base``; format -> export record."""
    from ego_assets.formats.ceres_lerobot import METADATA_FILE, shard_name, write_json

    egosmith = root / "exports" / "egosmith" / key
    holos = root / "exports" / "holos_hdf5" / key / f"{key}.h5"
    ceres = root / "exports" / "ceres-lerobot-v3" / key / "shards" / shard_name(index)
    targets = {"egosmith_shards": egosmith, "holos_hdf5": holos, "ceres_episode": ceres}
    # a shard's data, video and episodes files are named by its episode index
    base_index = json.loads((base["ceres_episode"] / METADATA_FILE).read_text())["episode"]["index"]
    renamed = (f"/file-{base_index:03d}.", f"/file-{index:03d}.")
    for path in sorted(p for p in base["trajectory"].rglob("*") if p.is_file()):
        dest = root / "trajectory" / key / path.relative_to(base["trajectory"])
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.link(path, dest)  # what a derived action space reads
    for fmt, target in targets.items():
        source = base[fmt]
        files = (
            [source] if source.is_file() else sorted(p for p in source.rglob("*") if p.is_file())
        )
        for path in files:
            rel = path.relative_to(source) if source.is_dir() else None
            dest = target / rel if rel is not None else target
            if fmt == "ceres_episode":
                dest = Path(str(dest).replace(*renamed))
            if rel is not None and rel.as_posix() == METADATA_FILE:
                doc = json.loads(path.read_text())
                doc["episode"].update({"capture_key": key, "index": index, "id": key})
                write_json(dest, doc)  # as the exporter writes it
                continue
            dest.parent.mkdir(parents=True, exist_ok=True)
            os.link(path, dest)
    return {
        fmt: {
            "path": target.relative_to(root).as_posix(),
            "sha256": (
                _file_digest(base[fmt])
                if fmt == "holos_hdf5"
                else hashlib.sha256(f"{key}:{fmt}".encode()).hexdigest()
            ),
            "bytes": sum(
                p.stat().st_size
                for p in ([target] if target.is_file() else target.rglob("*"))
                if p.is_file()
            ),
            "code_version": "bench",
        }
        for fmt, target in targets.items()
    }


@functools.cache
def _file_digest(path: Path) -> str:
    """SHA-256 of a base's file (read once: every replica is a link to it)."""
    from ego_assets.fileio import file_sha256

    return file_sha256(path)


def _episode(key: str, exports: dict[str, Any], rule: Any) -> Any:
    from ego_assets.releases.select import ReleaseEpisode
    from ego_assets.releases.spec import assign_split

    return ReleaseEpisode(
        capture_key=key,
        split=assign_split(rule, key),
        task="bench task",
        source_kind="webxr",
        device="bench device",
        demonstrator="bench",
        duration_s=None,
        trajectory_digest=hashlib.sha256(key.encode()).hexdigest(),
        gate={
            "decision": "allowed",
            "quality": "pass",
            "policy_version": "bench",
            "data_version": "bench",
            "blocking_reasons": [],
            "waived": False,
            "waivers": [],
        },
        exports=exports,
    )


def _files(folder: Path) -> dict[str, os.stat_result]:
    return {p.relative_to(folder).as_posix(): p.stat() for p in folder.rglob("*") if p.is_file()}


DROP_CACHES = Path("/proc/sys/vm/drop_caches")


def drop_caches() -> str:
    """Write back dirty pages and drop the clean ones (page cache, dentries, inodes):
    ``"dropped"``, or why nothing could be dropped (not Linux, not root)."""
    os.sync()
    try:
        DROP_CACHES.write_text("3\n")
    except OSError as exc:
        return f"not dropped: {DROP_CACHES}: {exc.strerror or exc}"
    return "dropped"


def _cpu_seconds() -> float:
    """CPU seconds (user + system) of this process and its waited-for children."""
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system


def _copy_seconds(source: Path, target: Path) -> float:
    """Wall seconds of ``cp -r source target`` (then removed and written back)."""
    os.sync()  # no write-back of what came before lands inside the timing
    start = time.perf_counter()
    subprocess.run(["cp", "-r", str(source), str(target)], check=True)
    seconds = time.perf_counter() - start
    shutil.rmtree(target)
    os.sync()
    return seconds


def _timed_build(*args: Any) -> tuple[Any, float, float]:
    """`build_version(*args)` after ``sync``: (its result, wall s, CPU s)."""
    from ego_assets.releases.build import build_version

    os.sync()  # the write-back of the phase before does not land inside this one
    cpu, start = _cpu_seconds(), time.perf_counter()
    result = build_version(*args)
    return result, time.perf_counter() - start, _cpu_seconds() - cpu


def run(
    episodes: int, added: int, seconds: float, bases: int, work: Path, keep_caches: bool = False
) -> dict[str, Any]:
    """Build v1, copy it, build v2 and an unchanged v2; the figures (module docstring)."""
    from ego_assets.releases.select import SelectionResult
    from ego_assets.releases.spec import parse_spec
    from ego_assets.storage import Storage

    root = work / "data"
    started = time.perf_counter()
    base = _base_exports(root, bases, seconds)
    spec = parse_spec(
        {
            "release": {"licence": "CC-BY-4.0", "formats": list(FORMATS)},
            "split": {"seed": 0, "fractions": {"train": 0.9, "valid": 0.1}},
        },
        "bench",
    )
    every = [
        _episode(key, _replicate(root, base[i % bases], key, 1000 + i), spec.split)
        for i, key in ((i, f"bench-{i:06d}") for i in range(episodes + added))
    ]
    prepare_s = time.perf_counter() - started
    storage = Storage(root)

    first, build_s, build_cpu_s = _timed_build(storage, spec, SelectionResult(every[:episodes]))
    dropped = "not dropped: --keep-caches" if keep_caches else drop_caches()
    cold_s = _copy_seconds(first.path, work / "v1-copy")
    warm_s = _copy_seconds(first.path, work / "v1-copy")  # right after: from the page cache
    v1 = _files(first.path)
    v1_bytes = sum(st.st_size for st in v1.values())

    second, incremental_s, incremental_cpu_s = _timed_build(storage, spec, SelectionResult(every))
    v2 = _files(second.path)
    inodes = {(st.st_ino, st.st_dev) for st in v1.values()}
    fresh = {p: st.st_size for p, st in v2.items() if (st.st_ino, st.st_dev) not in inodes}
    v2_bytes = sum(st.st_size for st in v2.values())
    per_format = {}
    for fmt in (*FORMATS, "other"):
        inside = (
            [p for p in v2 if p.split("/")[0] == fmt]
            if fmt != "other"
            else [p for p in v2 if p.split("/")[0] not in FORMATS]
        )
        total = sum(v2[p].st_size for p in inside)
        per_format[fmt] = {
            "bytes": total,
            "written": sum(fresh.get(p, 0) for p in inside),
            "ratio": sum(fresh.get(p, 0) for p in inside) / total if total else 0.0,
        }

    again, unchanged_s, _ = _timed_build(storage, spec, SelectionResult(every))
    copy_mean = (cold_s + warm_s) / 2

    eef = parse_spec(
        {
            "release": {"licence": "CC-BY-4.0", "formats": list(FORMATS)},
            "split": {"seed": 0, "fractions": {"train": 0.9, "valid": 0.1}},
            "actions": {"space": "eef_pose_gripper", "frame": "head"},
        },
        "bench-eef",
    )
    from ego_assets.releases.derived import derivation_cpu_s

    derived_before = derivation_cpu_s()
    _, eef_s, eef_cpu_s = _timed_build(storage, eef, SelectionResult(every[:episodes]))
    derive_cpu_s = derivation_cpu_s() - derived_before
    return {
        "episodes": episodes,
        "added": added,
        "seconds_per_episode": seconds,
        "bases": bases,
        "prepare_s": prepare_s,
        "v1_files": len(v1),
        "v1_bytes": v1_bytes,
        "build_s": build_s,
        "build_cpu_s": build_cpu_s,
        "copy_s": copy_mean,
        "ratio_vs_copy": build_s / copy_mean,
        "caches_dropped": dropped,
        "copy_cold_s": cold_s,
        "copy_warm_s": warm_s,
        "ratio_vs_cold_copy": build_s / cold_s,
        "ratio_vs_warm_copy": build_s / warm_s,
        "v2_files": len(v2),
        "v2_bytes": v2_bytes,
        "v2_written_bytes": sum(fresh.values()),
        "v2_written_files": len(fresh),
        "incremental_s": incremental_s,
        "incremental_cpu_s": incremental_cpu_s,
        "incremental_bytes_ratio": sum(fresh.values()) / v2_bytes,
        "incremental_by_format": per_format,
        "unchanged_s": unchanged_s,
        "unchanged_written": int(again.written),
        "eef_build_s": eef_s,
        "eef_build_cpu_s": eef_cpu_s,
        "derive_cpu_s": derive_cpu_s,
        "actions_share": derive_cpu_s / eef_cpu_s,
        "actions_share_of_wall": derive_cpu_s / eef_s,
        "eef_extra_share": (eef_s - build_s) / eef_s,
        "load_average_1m": os.getloadavg()[0],
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench release", description=__doc__)
    parser.add_argument("--episodes", type=int, default=10_000, help="episodes of v1")
    parser.add_argument("--added", type=int, default=100, help="episodes v2 adds")
    parser.add_argument("--seconds", type=float, default=2.0, help="length of each capture, s")
    parser.add_argument("--bases", type=int, default=2, help="real captures replicated")
    parser.add_argument("--work", type=Path, help="work folder (default: a temporary one)")
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument(
        "--keep-caches", action="store_true", help="do not drop the page cache before the cold copy"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.work is not None:
        args.work.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="bench-release-", dir=args.work) as tmp:
        result = run(
            args.episodes, args.added, args.seconds, args.bases, Path(tmp), args.keep_caches
        )
    rows = [
        ("episodes (v1) + added (v2)", f"{result['episodes']} + {result['added']}"),
        ("v1 files / bytes", f"{result['v1_files']} / {result['v1_bytes'] / 1e6:.1f} MB"),
        ("v1 build: wall / CPU", f"{result['build_s']:.1f} s / {result['build_cpu_s']:.1f} s"),
        (
            "cp -r of v1: cold / warm",
            f"{result['copy_cold_s']:.1f} s / {result['copy_warm_s']:.1f} s "
            f"(caches {result['caches_dropped']})",
        ),
        ("ratio_vs_cold_copy", f"{result['ratio_vs_cold_copy']:.2f}"),
        ("ratio_vs_warm_copy (target <= 2)", f"{result['ratio_vs_warm_copy']:.2f}"),
        ("ratio_vs_copy (their mean)", f"{result['ratio_vs_copy']:.2f}"),
        (
            "v2 build: wall / CPU",
            f"{result['incremental_s']:.1f} s / {result['incremental_cpu_s']:.1f} s",
        ),
        (
            "v2 written / v2 bytes",
            f"{result['v2_written_bytes'] / 1e6:.1f} / {result['v2_bytes'] / 1e6:.1f} MB "
            f"in {result['v2_written_files']} files",
        ),
        ("incremental_bytes_ratio (<= 0.05)", f"{result['incremental_bytes_ratio']:.4f}"),
        *(
            (f"  {fmt} written / bytes", f"{v['ratio']:.4f} of {v['bytes'] / 1e6:.1f} MB")
            for fmt, v in result["incremental_by_format"].items()
        ),
        (
            "unchanged build",
            f"{result['unchanged_s']:.1f} s, written {result['unchanged_written']}",
        ),
        (
            "eef release build (same episodes): wall / CPU",
            f"{result['eef_build_s']:.1f} s / {result['eef_build_cpu_s']:.1f} s",
        ),
        ("  deriving the actions: CPU", f"{result['derive_cpu_s']:.1f} s"),
        ("actions_share: of the CPU (target <= 0.10)", f"{result['actions_share']:.3f}"),
        ("actions_share_of_wall", f"{result['actions_share_of_wall']:.3f}"),
        ("eef_extra_share (eef - v1) / eef", f"{result['eef_extra_share']:.3f}"),
        ("load average (1 min)", f"{result['load_average_1m']:.2f}"),
    ]
    report(name_value_table(rows), result, args.json)
    return 0
