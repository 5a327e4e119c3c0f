"""The episode recording, read back with Rerun's own reader (`rerun.chunk.RrdReader`).

One short capture of every demo source kind (Vision Pro with dropped video frames, so
its cameras have gaps; WebXR with a retried segment and a hand never seen) and the
real Aria MPS sample are built once per module.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path

import av
import numpy as np
import pyarrow.parquet as pq
import pytest
import rerun as rr
from rerun.chunk import RrdReader

from ego_assets.capture import read_capture
from ego_assets.capture.manifest import write_marker
from ego_assets.cli import main
from ego_assets.defs.demo import aria_fixture_dir
from ego_assets.formats.ceres_lerobot import write_shard
from ego_assets.formats.holos_hdf5 import write_file
from ego_assets.quality.expectations import run_expectations
from ego_assets.quality.gate import GATE_FILE, Gate
from ego_assets.quality.policy import default_policy
from ego_assets.quality.report import compute_report
from ego_assets.synth import synthesize
from ego_assets.trajectory.model import Trajectory
from ego_assets.trajectory.store import write_trajectory
from ego_assets.viewer import RECORDING_FILE
from ego_assets.viewer.recording import RecordingSummary, build_recording
from ego_assets.viewer.skeleton import chains
from ego_assets_tests.processes import free_port

# (kind, fault options)
KINDS = {
    "holos-visionpro": ("dropped_video_frames",),
    "holos-iphone": (),
    "webxr": ("retried_segment", "hand_never_seen"),
    "mano-video": (),
}


@dataclass
class Column:
    """One component of one entity over time, as read back (rows sorted by time)."""

    time_ns: np.ndarray
    values: list
    frame: np.ndarray | None


@dataclass
class Built:
    trajectory: Trajectory
    capture: Path
    summary: RecordingSummary
    columns: dict[tuple[str, str], Column]
    static: dict[tuple[str, str], object]
    gate: Gate


def read_back(path: Path) -> tuple[dict[tuple[str, str], Column], dict[tuple[str, str], object]]:
    """(entity, component) -> temporal `Column`, and -> static value, from an .rrd file."""
    parts: dict[tuple[str, str], list[tuple[np.ndarray, list, np.ndarray | None]]] = {}
    static: dict[tuple[str, str], object] = {}
    for chunk in RrdReader(path).stream():
        batch = chunk.to_record_batch()
        indexes = {"rerun.controls.RowId", "time", "frame_index"}
        names = [n for n in batch.schema.names if n not in indexes and not n.startswith("frame_")]
        if chunk.is_static:
            for name in names:
                static[(chunk.entity_path, name)] = batch.column(name)[0].as_py()
            continue
        index = "time" if "time" in batch.schema.names else "frame_index"
        times = batch.column(index).cast("int64").to_numpy()
        frame_cols = [n for n in batch.schema.names if n.startswith("frame_")]
        frame = batch.column(frame_cols[0]).to_numpy() if frame_cols else None
        for name in names:
            parts.setdefault((chunk.entity_path, name), []).append(
                (times, batch.column(name).to_pylist(), frame)
            )
    columns = {}
    for key, pieces in parts.items():
        times = np.concatenate([p[0] for p in pieces])
        values = [v for p in pieces for v in p[1]]
        frames = [p[2] for p in pieces if p[2] is not None]
        order = np.argsort(times, kind="stable")
        columns[key] = Column(
            times[order],
            [values[i] for i in order],
            np.concatenate(frames)[order] if frames else None,
        )
    return columns, static


def _build(trajectory: Trajectory, capture: Path, out: Path) -> Built:
    report = compute_report(trajectory)
    gate = Gate.build(report, run_expectations(report), "test", default_policy())
    summary = build_recording(trajectory, out, media_dir=capture, report=report, gate=gate)
    columns, static = read_back(out)
    return Built(trajectory, capture, summary, columns, static, gate)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Built]:
    root = tmp_path_factory.mktemp("viewer")
    out: dict[str, Built] = {}
    for kind, faults in KINDS.items():
        capture = synthesize(kind, root / kind, seconds=2.0, seed=5, faults=faults)
        trajectory = read_capture(f"view-{kind}", capture)
        out[kind] = _build(trajectory, capture, root / f"{kind}.rrd")
    aria = root / "aria"
    shutil.copytree(aria_fixture_dir(), aria)
    write_marker(aria, "aria_mps")
    out["aria-mps"] = _build(read_capture("view-aria", aria), aria, root / "aria.rrd")
    return out


def _ns(seconds: np.ndarray) -> np.ndarray:
    return np.round(np.asarray(seconds) * 1e9).astype(np.int64)


EXPECTED_ENTITIES = {
    "holos-visionpro": {
        ("/world/device", "Transform3D:translation"),
        ("/world/hand_left_world", "LineStrips3D:strips"),
        ("/world/wrist_right/hand_right_local", "LineStrips3D:strips"),
        ("/world/wrist_right", "Transform3D:quaternion"),
        ("/world/objects/anchor-0001", "Transform3D:translation"),
        ("/world/cameras/camera_left", "VideoFrameReference:timestamp"),
        ("/world/cameras/camera_right", "Pinhole:image_from_camera"),
        ("/signals/hand_left_world/wrist_speed", "Scalars:scalars"),
        ("/signals/gaps/camera_left_frames", "Scalars:scalars"),
        ("/events/gaps", "TextLog:text"),
        ("/events/procedure_steps", "TextLog:text"),
        ("/events/transcript", "TextLog:text"),
        ("/annotations/procedure_step", "TextDocument:text"),
    },
    "holos-iphone": {
        ("/world/device", "Transform3D:translation"),
        ("/world/hand_left_landmarks_3d", "LineStrips3D:strips"),
        ("/world/cameras/camera_back/landmarks/hand_left_landmarks_2d", "Points2D:positions"),
        ("/signals/hand_right_landmarks_3d/joint_confidence", "Scalars:scalars"),
        ("/signals/hand_right_landmarks_3d/hand_confidence", "Scalars:scalars"),
        ("/signals/imu/accel", "Scalars:scalars"),
    },
    "webxr": {
        ("/world/device", "Transform3D:translation"),
        ("/world/hand_left", "LineStrips3D:strips"),
        ("/world/cameras/camera_outward", "VideoFrameReference:timestamp"),
        ("/signals/pinch/left", "Scalars:scalars"),
        ("/signals/recorder_slots/gap", "Scalars:scalars"),
        ("/signals/segments/retry", "Scalars:scalars"),
        ("/events/segments", "TextLog:text"),
        ("/annotations/segment", "TextDocument:text"),
    },
    "mano-video": {
        ("/world/mano_left", "LineStrips3D:strips"),
        ("/world/cameras/video", "VideoFrameReference:timestamp"),
        ("/signals/mano_right/wrist_speed", "Scalars:scalars"),
    },
    "aria-mps": {
        ("/world/device/wrist_and_palm_poses_v3.hand_left", "LineStrips3D:strips"),
        ("/world/device/wrist_and_palm_poses.wrist_right", "Points3D:positions"),
        ("/signals/hand_tracking_results_v1.hand_left/hand_confidence", "Scalars:scalars"),
    },
}


@pytest.mark.parametrize("kind", sorted(EXPECTED_ENTITIES))
def test_entity_paths(built: dict[str, Built], kind: str) -> None:
    b = built[kind]
    missing = EXPECTED_ENTITIES[kind] - set(b.columns)
    assert not missing
    assert ("/quality/report", "TextDocument:text") in b.static
    assert ("/world", "ViewCoordinates:xyz") in b.static


@pytest.mark.parametrize("kind", sorted(EXPECTED_ENTITIES))
def test_one_row_per_sample_on_the_streams_own_clock(built: dict[str, Built], kind: str) -> None:
    b = built[kind]
    checked = 0
    for stream in b.trajectory.streams:
        if stream.kind not in ("hand_joints", "mano", "wrist_palm", "hand_landmarks_2d"):
            continue
        matches = [
            key
            for key in b.columns
            if key[0].endswith("/" + rr.escape_entity_path_part(stream.name))
            and key[1].split(":")[1] in ("strips", "positions")
        ]
        assert len(matches) == 1, stream.name
        column = b.columns[matches[0]]
        assert len(column.values) == len(stream)
        np.testing.assert_array_equal(column.time_ns, _ns(np.sort(stream.time)))
        checked += 1
    assert checked >= 2


def _blob(b: Built, path: str) -> bytes:
    value = b.static[(path, "AssetVideo:blob")]
    assert isinstance(value, list)
    return np.asarray(value[0], np.uint8).tobytes()


def _strip_points(row: list) -> np.ndarray:
    return np.array([p for strip in row for p in strip], np.float64).reshape(-1, 3)


def test_joint_positions_equal_the_trajectorys(built: dict[str, Built]) -> None:
    b = built["holos-visionpro"]
    stream = b.trajectory.stream("hand_right_world")
    column = b.columns[("/world/hand_right_world", "LineStrips3D:strips")]
    order = np.concatenate([np.asarray(c) for c in chains("arkit27")])
    tracked = np.flatnonzero(stream.fields["hand_valid"])
    i = int(tracked[len(tracked) // 2])
    row = column.values[int(np.searchsorted(column.time_ns, _ns(stream.time[i])))]
    expected = stream.fields["position"][i][order].astype(np.float32)
    np.testing.assert_array_equal(_strip_points(row), expected)
    # the first strip is wrist -> thumb tip (arkit27 joint 4)
    assert chains("arkit27")[0] == (0, 1, 2, 3, 4)
    np.testing.assert_allclose(row[0][-1], stream.fields["position"][i, 4], atol=1e-6)


def test_untracked_hands_draw_nothing(built: dict[str, Built]) -> None:
    b = built["webxr"]
    for hand in ("left", "right"):
        stream = b.trajectory.stream(f"hand_{hand}")
        rows = b.columns[(f"/world/hand_{hand}", "LineStrips3D:strips")].values
        drawn = np.array([len(r) > 0 for r in rows])
        np.testing.assert_array_equal(drawn, stream.fields["hand_valid"])
    assert not b.trajectory.stream("hand_left").fields["hand_valid"].any() or not (
        b.trajectory.stream("hand_right").fields["hand_valid"].any()
    )


@pytest.mark.parametrize("kind", ["holos-visionpro", "holos-iphone", "webxr", "mano-video"])
def test_video_frames_at_the_trajectorys_frame_times(built: dict[str, Built], kind: str) -> None:
    b = built[kind]
    videos = [m for m in b.trajectory.media if m.kind == "video"]
    assert videos
    for media in videos:
        assert media.frames_stream is not None
        frames = b.trajectory.stream(media.frames_stream)
        path = b.summary.videos[media.role]
        refs = b.columns[(path, "VideoFrameReference:timestamp")]
        np.testing.assert_array_equal(refs.time_ns, _ns(frames.time))
        assert refs.frame is not None
        np.testing.assert_array_equal(refs.frame, frames.fields["frame_index"])
        blob = _blob(b, path)
        pts = rr.AssetVideo(contents=blob, media_type="video/mp4").read_frame_timestamps_nanos()
        assert len(pts) == len(frames)
        np.testing.assert_array_equal([v[0] for v in refs.values], pts)


def _packets(data: bytes | Path) -> list[bytes]:
    import io

    source = io.BytesIO(data) if isinstance(data, bytes) else str(data)
    with av.open(source) as container:
        return [bytes(p) for p in container.demux(container.streams.video[0]) if p.size]


def test_video_is_stream_copied_not_reencoded(built: dict[str, Built]) -> None:
    b = built["holos-visionpro"]
    media = b.trajectory.media_ref("camera_left")
    blob = _blob(b, b.summary.videos["camera_left"])
    assert _packets(blob) == _packets(b.capture / media.path)
    web = built["webxr"]
    outward = web.trajectory.media_ref("camera_outward")
    blob = _blob(web, web.summary.videos["camera_outward"])
    assert blob == (web.capture / outward.path).read_bytes()


def test_gap_ranges_equal_the_reports(built: dict[str, Built]) -> None:
    b = built["holos-visionpro"]
    report = compute_report(b.trajectory)
    gaps = report.stream("camera_left_frames").gaps
    assert gaps
    column = b.columns[("/signals/gaps/camera_left_frames", "Scalars:scalars")]
    starts = [g.start_s for g in gaps]
    ends = [g.start_s + g.length_s for g in gaps]
    np.testing.assert_array_equal(column.time_ns, _ns(np.sort(starts + ends)))
    assert [v[0] for v in column.values] == [1.0, 0.0] * len(gaps)
    log = b.columns[("/events/gaps", "TextLog:text")]
    assert any(f"gap of {gaps[0].length_s:.3f} s" in v[0] for v in log.values)


def test_retried_segment_is_a_range_and_a_warning(built: dict[str, Built]) -> None:
    b = built["webxr"]
    s0 = b.trajectory.info.start_ns
    retries = [s for s in b.trajectory.annotations.segments if s.outcome == "retry"]
    assert retries
    column = b.columns[("/signals/segments/retry", "Scalars:scalars")]
    expected = sorted([s.start_ns - s0 for s in retries] + [s.end_ns - s0 for s in retries])
    np.testing.assert_allclose(column.time_ns, expected, atol=1)
    levels = b.columns[("/events/segments", "TextLog:level")].values
    assert [v[0] for v in levels].count("WARN") == len(retries)


def time_series_plots(path: Path) -> dict[str, list[str]]:
    """Title -> entities of each time-series plot in the recording's default layout."""
    reader = RrdReader(path)
    (store,) = reader.blueprints()
    titles: dict[str, str] = {}
    contents: dict[str, list[str]] = {}
    for chunk in reader.stream(store=store):
        batch = chunk.to_record_batch()
        row = {name: batch.column(name)[0].as_py() for name in batch.schema.names}
        if row.get("ViewBlueprint:class_identifier") == ["TimeSeries"]:
            titles[chunk.entity_path] = row["ViewBlueprint:display_name"][0]
        if "ViewContents:query" in row:
            contents[chunk.entity_path.removesuffix("/ViewContents")] = row["ViewContents:query"]
    return {title: contents[view] for view, title in titles.items()}


@pytest.mark.parametrize("kind", ["webxr", "holos-iphone", "holos-visionpro"])
def test_signals_are_plotted_one_unit_per_plot(built: dict[str, Built], kind: str) -> None:
    b = built[kind]
    plots = time_series_plots(b.summary.path)
    series = {e for e, c in b.columns if c == "Scalars:scalars" and e.startswith("/signals/")}
    plotted = [e for entities in plots.values() for e in entities]
    assert sorted(plotted) == sorted(series)  # each series in exactly one plot
    flags = plots["tracked, gaps, retries (0/1)"]
    for path in flags:
        assert {v[0] for v in b.columns[(path, "Scalars:scalars")].values} <= {0.0, 1.0}
    # (the webxr capture's left hand is never seen)
    hand = {"webxr": "hand_right", "holos-iphone": "hand_left_landmarks_3d"}.get(
        kind, "hand_left_world"
    )
    assert f"/signals/{hand}/tracked" in flags
    assert f"/signals/{hand}/wrist_speed" in plots["speed (m/s)"]
    expected = {
        "webxr": {"distance (m)": "/signals/pinch/left", "tracked, gaps, retries (0/1)":
                  "/signals/segments/retry"},
        "holos-iphone": {"acceleration (m/s²)": "/signals/imu/accel",
                         "angular rate (rad/s)": "/signals/imu/gyro",
                         "confidence (0-1)": f"/signals/{hand}/hand_confidence"},
        "holos-visionpro": {"tracked, gaps, retries (0/1)": "/signals/gaps/camera_left_frames"},
    }[kind]  # fmt: skip
    for title, path in expected.items():
        assert path in plots[title]


def test_quality_document_names_the_verdict_and_blocking_reasons(built: dict[str, Built]) -> None:
    b = built["webxr"]
    text = b.static[("/quality/report", "TextDocument:text")]
    assert isinstance(text, list)
    doc = text[0]
    assert f"# Quality: {compute_report(b.trajectory).status.upper()}" in doc
    assert not b.gate.passed  # a hand is never seen
    assert "Export gate: BLOCKED" in doc
    assert b.gate.reasons
    for reason in b.gate.reasons:
        assert reason in doc


def test_view_coordinates_follow_the_world_frame(built: dict[str, Built]) -> None:
    # every demo source is right-handed, Y up
    for b in built.values():
        assert b.static[("/world", "ViewCoordinates:xyz")] == [
            list(rr.components.ViewCoordinates.RIGHT_HAND_Y_UP.as_arrow_array()[0].as_py())
        ]


def test_cli_view_save_only_finds_raw_media_and_gate_in_a_storage_layout(
    built: dict[str, Built],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    b = built["webxr"]
    key = b.trajectory.info.capture_id
    write_trajectory(b.trajectory, tmp_path / "trajectory" / key)
    shutil.copytree(b.capture, tmp_path / "raw" / key / "capture")
    (tmp_path / "quality" / key).mkdir(parents=True)
    (tmp_path / "quality" / key / GATE_FILE).write_text(b.gate.to_json())
    out = tmp_path / "view.rrd"
    folder = str(tmp_path / "trajectory" / key)
    assert main(["view", folder, "--save-only", "--out", str(out)]) == 0
    assert str(out) in capsys.readouterr().out
    columns, static = read_back(out)
    assert ("/world/cameras/camera_outward", "VideoFrameReference:timestamp") in columns
    doc = static[("/quality/report", "TextDocument:text")]
    assert isinstance(doc, list) and "Export gate: BLOCKED" in doc[0]
    # by key: the same storage, no stored recording yet -> built from the stages
    by_key = tmp_path / "by-key.rrd"
    assert main(["view", key, "--data", str(tmp_path), "--save-only", "--out", str(by_key)]) == 0
    assert set(read_back(by_key)[0]) == set(columns)
    # a recording stored beside the report (quality steps before issue #34 wrote one) is
    # copied to --out, which defaults to ./<key>.rrd
    stored = tmp_path / "quality" / key / RECORDING_FILE
    shutil.copy(by_key, stored)
    stored.chmod(0o600)  # the copy gets the usual mode all the same
    capsys.readouterr()
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    assert main(["view", key, "--data", str(tmp_path), "--save-only"]) == 0
    assert "stored beside the quality report" in capsys.readouterr().out
    assert (work / f"{key}.rrd").read_bytes() == stored.read_bytes()
    copied = tmp_path / "copied.rrd"
    assert main(["view", key, "--data", str(tmp_path), "--save-only", "--out", str(copied)]) == 0
    assert copied.read_bytes() == stored.read_bytes()
    for written in (out, by_key, work / f"{key}.rrd", copied):
        assert_usual_mode(written)
    assert main(["view", "no-such-key", "--data", str(tmp_path), "--save-only"]) == 2
    assert sorted(p.name for p in work.iterdir()) == [f"{key}.rrd"]  # no leftovers


def assert_usual_mode(path: Path) -> None:
    """``path`` has the mode of any file this process creates (0644 under umask 022)."""
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask, path


@pytest.fixture
def trajectory_folder(built: dict[str, Built], tmp_path: Path) -> Path:
    """The webxr episode in a storage layout (trajectory, raw capture) under tmp_path."""
    b = built["webxr"]
    key = b.trajectory.info.capture_id
    write_trajectory(b.trajectory, tmp_path / "trajectory" / key)
    shutil.copytree(b.capture, tmp_path / "raw" / key / "capture")
    return tmp_path / "trajectory" / key


def test_cli_view_refuses_the_native_viewer_without_a_display_before_writing(
    trajectory_folder: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for name in ("DISPLAY", "WAYLAND_DISPLAY", "WAYLAND_SOCKET"):
        monkeypatch.delenv(name, raising=False)
    out = tmp_path / "never.rrd"
    assert main(["view", str(trajectory_folder), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "no display" in err and "--web" in err and len(err.strip().splitlines()) == 1
    assert not out.exists()


def test_cli_view_exits_non_zero_when_the_native_viewer_cannot_open(
    trajectory_folder: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    display = next(n for n in range(90, 200) if not Path(f"/tmp/.X11-unix/X{n}").exists())
    monkeypatch.setenv("DISPLAY", f":{display}")  # no X server there
    monkeypatch.setenv("CI", "true")  # the rerun binary sends no usage analytics on CI
    monkeypatch.setenv("RUST_LOG", "info")  # the viewer says where its gRPC server listens
    out = tmp_path / "native.rrd"
    port = free_port()
    status = main(["view", str(trajectory_folder), "--out", str(out), "--grpc-port", str(port)])
    assert status not in (0, 2)
    err = capfd.readouterr().err
    assert f"the Rerun viewer exited with status {status}" in err
    assert f"Listening for gRPC connections on 127.0.0.1:{port}" in err  # not 0.0.0.0
    assert "\x1b[" not in err  # the viewer's own lines come without colour codes
    assert_usual_mode(out)


@pytest.mark.parametrize("kind", ["holos-visionpro", "webxr", "mano-video"])
def test_camera_pose_and_pinhole_per_frame(built: dict[str, Built], kind: str) -> None:
    b = built[kind]
    media = next(m for m in b.trajectory.media if m.kind == "video")
    assert media.frames_stream is not None
    frames = b.trajectory.stream(media.frames_stream)
    path = b.summary.videos[media.role]
    ok = np.isfinite(frames.fields["world_to_camera"]).all(axis=(1, 2))
    i = int(np.flatnonzero(ok)[len(np.flatnonzero(ok)) // 2])
    camera_to_world = np.linalg.inv(frames.fields["world_to_camera"][i])
    rotation = b.columns[(path, "Transform3D:mat3x3")]
    translation = b.columns[(path, "Transform3D:translation")]
    row = int(np.searchsorted(rotation.time_ns, _ns(frames.time[i])))
    # Rerun stores 3x3 matrices column-major
    got = np.array(rotation.values[row][0]).reshape(3, 3).T
    np.testing.assert_allclose(got, camera_to_world[:3, :3], atol=1e-6)
    np.testing.assert_allclose(translation.values[row][0], camera_to_world[:3, 3], atol=1e-5)
    fx, fy, cx, cy = frames.fields["intrinsics"][i]
    k = np.array(b.columns[(path, "Pinhole:image_from_camera")].values[row][0]).reshape(3, 3).T
    np.testing.assert_allclose(k, [[fx, 0, cx], [0, fy, cy], [0, 0, 1]], rtol=1e-6)
    expected_axes = {"opencv": "RDF", "arkit": "RUB"}[str(frames.attrs["camera_axes"])]
    axes = getattr(rr.components.ViewCoordinates, expected_axes).as_arrow_array()[0].as_py()
    assert b.columns[(path, "Pinhole:camera_xyz")].values[row] == [axes]
    assert b.columns[(path, "Pinhole:resolution")].values[row] == [[media.width, media.height]]


def test_cli_view_lerobot_shard_as_the_format_carries_it_plus_skeletons_and_gaps(
    built: dict[str, Built], tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    b = built["webxr"]
    shard = tmp_path / "shard"
    shard.mkdir()
    write_shard(b.trajectory, b.capture, 0, shard)
    out = tmp_path / "shard.rrd"
    capfd.readouterr()
    assert main(["view", str(shard), "--save-only", "--out", str(out)]) == 0
    # clean output: one line naming the file, the reader's notes in plain words
    printed = capfd.readouterr()
    assert printed.err == ""
    (line,) = printed.out.splitlines()
    assert line.startswith(f"{out}: LeRobot dataset")
    assert "ceres.source_frame_index" in line and "\x1b[" not in line
    assert "ceres.source_gap" not in line  # the viewer adds what the reader skips
    assert_usual_mode(out)
    columns, _ = read_back(out)
    # what Rerun's LeRobotReader shows
    for key in (
        ("/observation.state", "Scalars:scalars"),
        ("/action", "Scalars:scalars"),
        ("/observation.images.passthrough", "VideoStream:sample"),
    ):
        assert key in columns
    # what the viewer adds from the dataset's own feature names
    names = json.loads((shard / "meta" / "info.json").read_text())["features"]["observation.state"][
        "names"
    ]
    data = pq.read_table(next((shard / "data").rglob("*.parquet")))
    state = np.stack(data["observation.state"].to_numpy(zero_copy_only=False))
    gaps = columns[("/ceres.source_gap", "Scalars:scalars")]
    np.testing.assert_array_equal(gaps.time_ns, data["frame_index"].to_numpy())
    assert [v[0] for v in gaps.values] == data["ceres.source_gap"].to_numpy().astype(float).tolist()
    drawn_any = False
    for side in ("left", "right"):
        strips = columns[(f"/skeleton/{side}", "LineStrips3D:strips")]
        assert len(strips.values) == data.num_rows
        tracked = state[:, names.index(f"{side}_hand.tracked")] > 0.5
        assert [len(r) > 0 for r in strips.values] == tracked.tolist()
        for row in np.flatnonzero(tracked)[:3]:
            wrist = [names.index(f"{side}_hand.wrist.position.{a}") for a in "xyz"]
            np.testing.assert_allclose(strips.values[row][0][0], state[row, wrist], atol=1e-6)
            drawn_any = True
    assert drawn_any


def test_cli_view_holos_hdf5_one_stream_per_clock_plus_skeletons(
    built: dict[str, Built], tmp_path: Path
) -> None:
    b = built["holos-visionpro"]
    h5 = tmp_path / "episode.h5"
    write_file(b.trajectory, b.capture, h5)
    out = tmp_path / "h5.rrd"
    assert main(["view", str(h5), "--save-only", "--out", str(out)]) == 0
    assert_usual_mode(out)
    columns, _ = read_back(out)
    device = b.trajectory.stream("device_pose")
    (pose,) = [v for k, v in columns.items() if k[0] == "/holos/raw/device_pose"]
    np.testing.assert_array_equal(pose.time_ns, _ns(device.time))
    assert any(k[0] == "/data/demo_0/obs" for k in columns)
    hand = b.trajectory.stream("hand_left_world")
    strips = columns[("/skeleton/left", "LineStrips3D:strips")]
    np.testing.assert_array_equal(strips.time_ns, _ns(hand.time))
    row = int(np.flatnonzero(hand.fields["hand_valid"])[0])
    np.testing.assert_allclose(strips.values[row][0][0], hand.fields["position"][row, 0], atol=1e-6)
    assert [len(r) > 0 for r in strips.values] == hand.fields["hand_valid"].tolist()
