import io
import json
import shutil
from pathlib import Path

import pytest

from ego_assets.capture.files import MARKER_FILE
from ego_assets.cli import INSPECT_COLUMNS, Bars, build_parser, main
from ego_assets.pipeline import ingest_raw
from ego_assets.progress import listening
from ego_assets.storage import Storage
from ego_assets.synth import FAULT_MEANINGS, KIND_MEANINGS, KINDS
from ego_assets.synth.video import DRAW_TASK, ENCODE_TASK
from ego_assets.trajectory.store import read_trajectory


@pytest.fixture(scope="module")
def capture(tmp_path_factory) -> Path:
    """A 1 s webxr capture made through the CLI (read-only for the tests)."""
    out = tmp_path_factory.mktemp("cli") / "cap-1"
    assert main(["synth", "--kind", "webxr", "--seconds", "1", "--seed", "3", str(out)]) == 0
    return out


def _one_line_error(capsys) -> str:
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1 and captured.err.startswith("error: ")
    assert "Traceback" not in captured.err
    return captured.err.strip()


def test_synth_convert_inspect_round_trip(tmp_path, capsys):
    capture = tmp_path / "cap-1"
    assert (
        main(["synth", "--kind", "mano-video", "--seconds", "1", "--seed", "3", str(capture)]) == 0
    )
    marker = json.loads((capture / "ego_capture.json").read_text())
    assert marker["kind"] == "mano_video"
    assert main(["convert", str(capture), str(tmp_path / "traj")]) == 0
    assert main(["inspect", str(tmp_path / "traj")]) == 0
    captured = capsys.readouterr()
    assert "cap-1: 3 streams" in captured.out
    assert "mano_left" in captured.out and "video_frames" in captured.out
    assert captured.err == ""  # no progress bar when stderr is not a terminal


def test_bad_fault_option_and_bad_capture_are_reported_not_raised(tmp_path, capsys):
    assert main(["synth", "--kind", "webxr", "--faults", "bogus", str(tmp_path / "x")]) == 2
    assert "unknown fault option" in _one_line_error(capsys)
    assert not (tmp_path / "x").exists()
    (tmp_path / "bad").mkdir()
    assert main(["convert", str(tmp_path / "bad"), str(tmp_path / "out")]) == 2
    error = _one_line_error(capsys)
    assert "capture 'bad', file 'ego_capture.json': file is missing" in error
    assert not (tmp_path / "out").exists()


def _tree(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*"))


NOT_A_URL = "a local folder is needed, not a URL"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--seconds", "-3"], "error: --seconds must be > 0 (got -3)"),
        (["--seconds", "0"], "error: --seconds must be > 0 (got 0)"),
        (["--seconds", "nan"], "error: --seconds must be > 0 (got nan)"),
        (["--seconds", "inf"], "error: --seconds must be a finite number of seconds (got inf)"),
        (["--data", "notes.txt"], "error: --data notes.txt is not a folder"),
        (["--data", "notes.txt/d"], "error: --data notes.txt/d: {cwd}/notes.txt is not a folder"),
        (["--data", "s3://b/data"], f"error: --data s3://b/data: {NOT_A_URL}"),
        ([], "error: DAGSTER_HOME {cwd}/notes.txt is not a folder"),
    ],
)
def test_demo_refuses_bad_input_before_writing_anything(
    tmp_path, capsys, monkeypatch, argv, message
):
    """`ego-assets demo` checks every flag (and $DAGSTER_HOME) first (#35): rc 2, one
    line naming the flag, and not even ./data/landing created."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.txt").write_text("not a folder")
    if not argv:
        monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "notes.txt"))
    else:
        monkeypatch.delenv("DAGSTER_HOME", raising=False)
    assert main(["demo", *argv]) == 2
    assert _one_line_error(capsys) == message.format(cwd=tmp_path)
    assert _tree(tmp_path) == ["notes.txt"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--seconds", "-3"], "error: --seconds must be > 0 (got -3)"),
        (["--seconds", "inf"], "error: --seconds must be a finite number of seconds (got inf)"),
        (["--faults", "dropout,bogus"], "error: unknown fault option(s) ['bogus']; known: "),
    ],
)
def test_synth_refuses_bad_options_before_writing_anything(tmp_path, capsys, argv, message):
    out = tmp_path / "sub" / "cap"
    assert main(["synth", "--kind", "webxr", *argv, str(out)]) == 2
    assert _one_line_error(capsys).startswith(message)
    assert _tree(tmp_path) == []  # not even the parent folder


def test_help_states_every_option_its_default_and_the_kinds_and_faults(capsys):
    parser = build_parser()
    commands = parser._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    for name, command in commands.items():
        for action in command._actions:
            assert action.help, f"{name} {action.option_strings or action.dest} has no help"
        text = command.format_help()
        for action in command._actions:
            if action.option_strings and action.default not in (None, False, "", "==SUPPRESS=="):
                assert f"(default: {action.default})" in " ".join(text.split()), (name, action)
    with pytest.raises(SystemExit) as done:
        main(["synth", "--help"])
    assert done.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "--seconds SECONDS capture length, seconds (default: 10.0)" in text
    assert "--seed SEED random seed (default: 0)" in text
    assert set(KIND_MEANINGS) == set(KINDS)
    for kind, meaning in KIND_MEANINGS.items():
        assert f"{kind} {meaning}" in text
    for fault, meaning in FAULT_MEANINGS.items():
        assert f"{fault} {meaning}" in text
    assert "quaternion_wxyz webxr joint rotations written w first [webxr]" in text


def test_synth_refuses_an_existing_folder_unless_force_and_never_replaces_other_folders(
    capture, tmp_path, capsys
):
    out = tmp_path / "cap"
    shutil.copytree(capture, out)
    before = (out / MARKER_FILE).read_bytes()
    assert main(["synth", "--kind", "webxr", "--seconds", "1", str(out)]) == 2
    assert (
        _one_line_error(capsys) == f"error: output folder {out} exists; pass --force to replace it"
    )
    assert (out / MARKER_FILE).read_bytes() == before
    args = ["synth", "--kind", "mano-video", "--seconds", "1", "--force", str(out)]
    assert main(args) == 0
    assert json.loads((out / MARKER_FILE).read_text())["kind"] == "mano_video"
    assert not (out / "slots.jsonl").exists()  # replaced whole, not merged
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "thesis.tex").write_text("precious")
    assert main(["synth", "--kind", "webxr", "--force", str(notes)]) == 2
    assert "is not a capture folder (no ego_capture.json)" in _one_line_error(capsys)
    assert (notes / "thesis.tex").read_text() == "precious"


def test_convert_refuses_an_existing_output_unless_force_and_reads_a_raw_copy(
    capture, tmp_path, capsys
):
    out = tmp_path / "traj"
    assert main(["convert", str(capture), str(out)]) == 0
    first = read_trajectory(out)
    stamp = (out / "capture.json").stat().st_mtime_ns
    assert main(["convert", str(capture), str(out)]) == 2
    assert _one_line_error(capsys).endswith("exists; pass --force to replace it")
    assert (out / "capture.json").stat().st_mtime_ns == stamp
    assert main(["convert", "--force", str(capture), str(out)]) == 0
    # a raw copy made by the platform converts to the same trajectory
    storage = Storage(tmp_path / "data")
    shutil.copytree(capture, tmp_path / "data" / "landing" / "cap-1")
    ingest_raw(storage, "cap-1")
    again = tmp_path / "from-raw"
    assert main(["convert", str(tmp_path / "data" / "raw" / "cap-1"), str(again)]) == 0
    assert read_trajectory(again).info == first.info
    assert [len(s) for s in read_trajectory(again).streams] == [len(s) for s in first.streams]


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["convert", "{tmp}/nope", "{tmp}/out"], "error: capture folder {tmp}/nope does not exist"),
        (["inspect", "{tmp}/nope"], "error: folder {tmp}/nope does not exist"),
        (["inspect", "{tmp}/file.txt"], "error: folder {tmp}/file.txt is not a folder"),
        (
            ["inspect", "{tmp}"],
            "error: {tmp} is neither a trajectory folder (no capture.json) nor a capture "
            "folder (no ego_capture.json)",
        ),
        (
            ["synth", "--kind", "webxr", "{tmp}/file.txt/cap"],
            "error: output {tmp}/file.txt/cap: {tmp}/file.txt is not a folder",
        ),
    ],
)
def test_missing_and_wrong_paths_are_one_line_errors(tmp_path, capsys, argv, expected):
    (tmp_path / "file.txt").write_text("x")
    argv = [a.format(tmp=tmp_path) for a in argv]
    assert main(argv) == 2
    assert _one_line_error(capsys) == expected.format(tmp=tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file.txt"]


def _table(out: str) -> list[list[str]]:
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("stream "))
    return [line.split() for line in lines[start:]]


def test_inspect_prints_a_header_row_with_units_for_trajectories_captures_and_raw_copies(
    capture, tmp_path, capsys
):
    assert main(["convert", str(capture), str(tmp_path / "traj")]) == 0
    trajectory = read_trajectory(tmp_path / "traj")
    storage = Storage(tmp_path / "data")
    shutil.copytree(capture, tmp_path / "data" / "landing" / "cap-1")
    ingest_raw(storage, "cap-1")
    capsys.readouterr()
    tables = []
    for folder in (tmp_path / "traj", capture, tmp_path / "data" / "raw" / "cap-1"):
        assert main(["inspect", str(folder)]) == 0
        out = capsys.readouterr().out
        assert out.splitlines()[0].startswith("capture   cap-1  (")
        tables.append(_table(out))
    assert tables[0] == tables[1] == tables[2]
    header, *rows = tables[0]
    assert " ".join(header) == " ".join(INSPECT_COLUMNS)
    by_name = {row[0]: row for row in rows}
    assert set(by_name) == {s.name for s in trajectory.streams}
    for stream in trajectory.streams:
        _, kind, n_rows, rate, first, last, source = by_name[stream.name]
        assert (kind, int(n_rows)) == (stream.kind, len(stream))
        assert float(last) == pytest.approx(float(stream.time.max()), abs=5e-4)
        assert float(first) == pytest.approx(float(stream.time.min()), abs=5e-4)
        assert (
            rate == f"{stream.attrs['nominal_rate_hz']:g}"
            if "nominal_rate_hz" in stream.attrs
            else "-"
        )
        assert source == stream.attrs.get("source_file", "-")
    assert by_name["hand_left"][3] == "30" and by_name["hand_left"][6] == "slots.jsonl"


def test_long_work_reports_progress_and_the_cli_draws_it_as_bars(tmp_path):
    seen: list[tuple[str, int, int]] = []
    with listening(lambda task, done, total: seen.append((task, done, total))):
        assert main(["synth", "--kind", "webxr", "--seconds", "1", str(tmp_path / "c")]) == 0
        assert main(["convert", str(tmp_path / "c"), str(tmp_path / "t")]) == 0
    frames = 30  # 1 s of 30 fps video
    assert [s for s in seen if s[0] == DRAW_TASK][-1] == (DRAW_TASK, frames, frames)
    assert [s for s in seen if s[0] == ENCODE_TASK][-1] == (ENCODE_TASK, frames, frames)
    hashed = [s for s in seen if "bytes" in s[0]]
    total = sum(p.stat().st_size for p in (tmp_path / "c").rglob("*") if p.is_file())
    assert hashed[-1][1:] == (total, total)
    terminal = io.StringIO()
    bars = Bars(terminal, delay_s=0)
    for task, done, total in seen:
        bars(task, done, total)
    bars.close()
    text = terminal.getvalue()
    for bar in (f"{DRAW_TASK}:", f"{ENCODE_TASK}:", "/30 ", "frames/s", "checking capture files:"):
        assert bar in text
    assert "B/s" in text  # bytes are counted in bytes


# ------------------------------------------------- refusals before anything is written


@pytest.fixture
def instance_home(tmp_path, monkeypatch) -> Path:
    """$DAGSTER_HOME with a SQLite instance where ``cap-known`` is a registered capture."""
    import dagster as dg

    from ego_assets.defs.partitions import register_captures

    home = tmp_path / "home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    with dg.DagsterInstance.get() as instance:
        register_captures(instance, ["cap-known"], 1)
    return home


def _backfills(home: Path) -> int:
    import dagster as dg

    with dg.DagsterInstance.get() as instance:
        return len(instance.get_backfills())


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            ["backfill", "--captures", "cap-known", "no-such-capture"],
            "error: not registered captures: no-such-capture; a capture is registered when "
            "the landing sensor (or `ego-assets demo`) sees it",
        ),
        (
            ["backfill", "--captures", "cap-known", "--sets", "3"],
            "error: not registered captures (among 3 capture sets): cap-known; a capture is "
            "registered when the landing sensor (or `ego-assets demo`) sees it",
        ),
        (
            ["backfill", "--all", "--assets", "trajectory,quality_catalog"],
            "error: not per-capture assets: quality_catalog; choose from raw_capture, "
            "trajectory, quality_report, holos_hdf5, ceres_episode, egosmith_shards",
        ),
        (
            ["where", "no-such-capture"],
            "error: not registered captures: no-such-capture; a capture is registered when "
            "the landing sensor (or `ego-assets demo`) sees it",
        ),
        (
            ["backfill", "--all", "--sets", "1000"],
            "error: EGO_CAPTURE_SETS must be a whole number from 1 to 999: '1000'",
        ),
    ],
)
def test_the_dagster_commands_refuse_unknown_captures_assets_and_sets_before_launching(
    instance_home, capsys, argv, expected
):
    from ego_assets.capture_sets import PER_CAPTURE_ASSETS

    expected = expected.replace(
        "raw_capture, trajectory, quality_report, holos_hdf5, ceres_episode, egosmith_shards",
        ", ".join(PER_CAPTURE_ASSETS),
    )
    assert main(argv) == 2
    assert _one_line_error(capsys) == expected
    assert _backfills(instance_home) == 0


def test_a_registered_capture_is_launched_and_located(instance_home, capsys):
    assert main(["backfill", "--captures", "cap-known", "--assets", "trajectory"]) == 0
    assert (
        capsys.readouterr().out.splitlines()[-1].startswith("1 backfills, 1 captures, trajectory")
    )
    assert _backfills(instance_home) == 1
    assert main(["where", "cap-known"]) == 0
    assert "cap-known: set 0  partitions captures" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ["no-such-capture", "longest_gap_s"],
            "error: no capture 'no-such-capture' under {data} (no landing folder, raw copy, "
            "trajectory or quality report)",
        ),
        (["cap-1", "bogus_metric"], "error: no quality metric 'bogus_metric'; metrics: {metrics}"),
        (
            ["cap-1", "hand:left/bogus"],
            "error: no quality metric 'hand:left/bogus'; metrics: {metrics}",
        ),
        (["../etc", "longest_gap_s"], None),
    ],
)
def test_waive_refuses_unknown_captures_and_metrics_and_writes_nothing(
    tmp_path, capsys, args, expected
):
    from ego_assets.quality.thresholds import default_thresholds
    from ego_assets.quality.waivers import WAIVERS_FILE

    data = tmp_path / "data"
    (data / "raw" / "cap-1").mkdir(parents=True)
    argv = ["waive", *args, "--reason", "x", "--by", "me", "--data", str(data)]
    assert main(argv) == 2
    error = _one_line_error(capsys)
    if expected is not None:
        metrics = ", ".join(m.name for m in default_thresholds().metrics)
        assert error == expected.format(data=data, metrics=metrics)
    assert not (data / WAIVERS_FILE).exists()
    # a known capture and metric (with a scope) is waived
    assert (
        main(
            [
                "waive",
                "cap-1",
                "stream:head/longest_gap_s",
                "--reason",
                "x",
                "--by",
                "me",
                "--data",
                str(data),
            ]
        )
        == 0
    )
    assert json.loads((data / WAIVERS_FILE).read_text())["waivers"][0]["metric"] == (
        "stream:head/longest_gap_s"
    )


@pytest.mark.parametrize(
    "argv",
    [
        ["backfill", "--all"],
        ["backfill", "--captures", "cap-1"],
        ["where", "cap-1"],
        ["partitions", "migrate", "--sets", "2"],
        ["serve", "--port", "1"],
    ],
)
@pytest.mark.parametrize("home", [None, "relative/home"])
def test_commands_without_their_instance_say_so_in_one_line(
    tmp_path, monkeypatch, capsys, argv, home
):
    monkeypatch.chdir(tmp_path)
    if home is None:
        monkeypatch.delenv("DAGSTER_HOME", raising=False)
    else:
        monkeypatch.setenv("DAGSTER_HOME", home)
    assert main(argv) == 2
    error = _one_line_error(capsys)
    assert error.startswith("error: no Dagster instance: ") and "DAGSTER_HOME" in error
    assert list(tmp_path.iterdir()) == []


def test_every_command_has_a_help_description():
    parser = build_parser()
    commands = parser._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    described = {
        name: (command.description or "").strip()
        for name, command in commands.items()
        if name != "partitions"
    }
    assert {n for n, d in described.items() if len(d) < 40} == set()
    for name in ("demo", "waive", "validate", "catalog", "serve"):
        assert described[name] != commands[name].format_usage()


def test_hash_token_prints_the_api_toml_entry(capsys):
    import hashlib
    import tomllib

    assert main(["serve", "--hash-token", "s3cret", "--token-id", "holos-ci"]) == 0
    out = capsys.readouterr().out
    digest = hashlib.sha256(b"s3cret").hexdigest()
    assert out == f'holos-ci = "sha256:{digest}"\n'
    assert tomllib.loads(out) == {"holos-ci": f"sha256:{digest}"}
