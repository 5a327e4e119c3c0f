import json

from ego_assets.cli import main


def test_synth_convert_inspect_round_trip(tmp_path, capsys):
    capture = tmp_path / "cap-1"
    assert (
        main(["synth", "--kind", "mano-video", "--seconds", "1", "--seed", "3", str(capture)]) == 0
    )
    marker = json.loads((capture / "ego_capture.json").read_text())
    assert marker["kind"] == "mano_video"
    assert main(["convert", str(capture), str(tmp_path / "traj")]) == 0
    assert main(["inspect", str(tmp_path / "traj")]) == 0
    out = capsys.readouterr().out
    assert "cap-1: 3 streams" in out
    assert "mano_left" in out and "video_frames" in out


def test_bad_fault_option_and_bad_capture_are_reported_not_raised(tmp_path, capsys):
    assert main(["synth", "--kind", "webxr", "--faults", "bogus", str(tmp_path / "x")]) == 2
    assert "unknown fault option" in capsys.readouterr().err
    (tmp_path / "bad").mkdir()
    assert main(["convert", str(tmp_path / "bad"), str(tmp_path / "out")]) == 2
    assert "capture 'bad', file 'ego_capture.json': file is missing" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
