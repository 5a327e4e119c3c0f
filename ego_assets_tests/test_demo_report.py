"""The demo's report reads whole: a failed capture's full error, wrapped and never cut;
every landing-zone entry the sensor passes over, with why (ego_assets/demo_report.py,
ego_assets/landing.py)."""

from __future__ import annotations

import io
from pathlib import Path

from ego_assets.demo_report import (
    WIDTH,
    CaptureStatus,
    capture_status,
    print_captures,
    skipped_status,
)
from ego_assets.landing import scan_landing, skipped_entries
from ego_assets.storage import Storage
from ego_assets.synth import synthesize

# A failure as a run reports it: long, several lines, a file name past character 160.
ERROR = (
    "capture cap-1: file streams/hand_left.csv, field joint_3_x, row 18,204: expected a "
    "float, found 'n/a' (the recorder writes 'n/a' for untracked joints; the marker "
    "declares format webxr-1.2, which has no such value)\n"
    "raised while reading file name 'streams/hand_left.csv' of capture cap-1"
)


def test_a_failure_is_printed_whole_and_wrapped() -> None:
    out = io.StringIO()
    status = capture_status(Storage(Path("/nonexistent")), "cap-1", failure=ERROR)
    assert (status.status, status.problems) == ("FAILED", (ERROR,))
    print_captures([status], Path("/data"), out)
    text = out.getvalue()
    assert " ".join(text[text.index("cap-1 (FAILED):") :].split()) == " ".join(
        f"cap-1 (FAILED): - {ERROR}".split()
    )
    assert max(len(line) for line in text.splitlines()) <= WIDTH
    assert "file name 'streams/hand_left.csv'" in text  # past character 160, not cut


def test_the_summary_row_says_the_gates_word() -> None:
    out = io.StringIO()
    rows = [
        CaptureStatus("cap-1", "webxr", "2.00", "6", "warn", "exported"),
        CaptureStatus("cap-2", "webxr", "2.00", "6", "fail", "blocked", ("blocked by x",)),
        skipped_status("odd é", "the folder name is not a capture key"),
    ]
    print_captures(rows, Path("/data"), out)
    lines = out.getvalue().splitlines()
    assert lines[1] == "captures (data root /data)"
    assert lines[2].split()[-3:] == ["streams", "quality", "status"]
    assert lines[4].split()[-2:] == ["fail", "blocked"]
    assert lines[5].split()[-2:] == ["-", "skipped"]
    assert "  landing/odd é (skipped):" in lines
    assert "    - the folder name is not a capture key" in lines


def test_every_entry_the_sensor_passes_over_is_listed_with_why(tmp_path: Path) -> None:
    landing = tmp_path / "data" / "landing"
    synthesize("webxr", landing / "good-1", seconds=1.0, seed=1, capture_id="good-1")
    synthesize("webxr", landing / "bad capture é", seconds=1.0, seed=2)
    synthesize("webxr", tmp_path / "elsewhere", seconds=1.0, seed=3, capture_id="linked-1")
    (landing / "linked-1").symlink_to(tmp_path / "elsewhere")
    (landing / "half-uploaded").mkdir()
    (landing / "notes.txt").write_text("not a capture")
    storage = Storage(tmp_path / "data")
    # the sensor takes the one complete capture in a folder of its own
    assert scan_landing(storage, None, 100).keys == ("good-1",)
    skipped = dict(skipped_entries(storage))
    assert sorted(skipped) == ["bad capture é", "half-uploaded", "linked-1", "notes.txt"]
    assert skipped["bad capture é"].startswith("the folder name is not a capture key: ")
    assert skipped["linked-1"] == (
        f"a symlink to {tmp_path / 'elsewhere'}, not a folder in the landing zone"
    )
    assert skipped["half-uploaded"].startswith("no ego_capture.json: an upload in progress")
    assert skipped["notes.txt"] == "a file, not a capture folder"
