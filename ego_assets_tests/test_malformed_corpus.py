"""Malformed captures of every kind: one clear error each, and nothing written.

The corpus (`ego_assets_tests.malformed`) breaks small synthetic captures and the
packaged Aria MPS sample one way per case; ``ego-assets convert`` must answer with
exactly one line that names the capture, the file and the problem, exit 2 and leave
no output folder. Cases that the format accepts (a CSV byte-order mark) convert.
"""

from __future__ import annotations

import collections
from pathlib import Path

import pytest

from ego_assets.capture import read_capture
from ego_assets_tests.malformed import CLASSES, KINDS, Case, make_base, prepare, run_convert
from ego_assets_tests.malformed_cases import CASES


@pytest.fixture(scope="module")
def bases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("bases")
    return {kind: make_base(kind, root / kind) for kind in KINDS}


def test_the_corpus_covers_every_kind_and_class_with_at_least_40_cases():
    assert len(CASES) >= 40
    assert len({case.name for case in CASES}) == len(CASES)
    assert {case.kind for case in CASES} == set(KINDS)
    assert {case.klass for case in CASES} == set(CLASSES)
    per_kind = collections.Counter(case.kind for case in CASES)
    assert min(per_kind.values()) >= 7


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_malformed_capture_gives_one_clear_error_and_writes_nothing(
    case: Case, bases: dict[str, Path], tmp_path: Path
):
    capture = prepare(case, bases, tmp_path)
    out = tmp_path / "out"
    code, err = run_convert(capture, out)
    if case.accepted:
        assert code == 0, err
        assert (out / "capture.json").is_file()
        return
    lines = err.strip().splitlines()
    assert code == 2
    assert len(lines) == 1, err
    assert lines[0].startswith(f"error: capture {case.name!r}, file {case.file!r}")
    assert case.problem in lines[0]
    assert "Traceback" not in err
    assert not out.exists()


def test_a_csv_byte_order_mark_is_skipped_and_the_values_are_read(bases, tmp_path):
    case = next(c for c in CASES if c.name == "hv-pose-bom")
    plain = read_capture("plain", bases[case.kind]).stream("device_pose")
    with_bom = read_capture("bom", prepare(case, bases, tmp_path)).stream("device_pose")
    assert with_bom.timestamp_ns.tolist() == plain.timestamp_ns.tolist()
    assert (with_bom.fields["position"] == plain.fields["position"]).all()


def test_a_backwards_step_inside_the_plausible_range_stays_a_flagged_data_fault(bases, tmp_path):
    from ego_assets.trajectory.streams import SampleFlag
    from ego_assets_tests.malformed import set_csv

    case = Case(
        "hv-backwards",
        "holos-visionpro",
        "absurd-time",
        "",
        "",
        set_csv("device_pose.csv", 5, "t_mono_s", "5000"),
    )
    stream = read_capture("back", prepare(case, bases, tmp_path)).stream("device_pose")
    assert stream.flags[4] & SampleFlag.BACKWARDS_TIMESTAMP
    assert stream.timestamp_ns[4] == 1_793_000_000_000_000_000 + 5000 * 10**9
