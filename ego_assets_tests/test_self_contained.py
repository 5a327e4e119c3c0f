"""The repository stands alone: a user clones it without the team's reference shelf."""

from __future__ import annotations

import subprocess
from pathlib import Path

from ego_assets.fixtures import real_fixture

REPO = Path(__file__).resolve().parents[1]
# Spelled in two pieces so this file does not match its own search.
FORBIDDEN = ("../" + "shared", "EGO_" + "SHARED_DIR")


def _tracked_files() -> list[Path]:
    out = subprocess.run(
        ["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True
    ).stdout
    return [REPO / name for name in out.decode().split("\0") if name]


def test_no_file_refers_to_the_reference_shelf():
    offenders = []
    for path in _tracked_files():
        if path.name == "CHANGELOG.md" or not path.is_file():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        offenders += [f"{path.relative_to(REPO)}: {word}" for word in FORBIDDEN if word in text]
    assert offenders == []


def test_real_recordings_ship_with_their_licences():
    handy = real_fixture("handy_js")
    aria = real_fixture("aria_mps_hand_tracking")
    assert (handy / "LICENSE-MIT.txt").read_text().startswith("MIT License")
    assert "Apache License" in (aria / "LICENSE-Apache-2.0.txt").read_text()
    assert (handy / "handy_poses_left.json").stat().st_size == 35581
    assert (aria / "wrist_and_palm_poses_v3.csv").stat().st_size == 77080
    for folder in (handy, aria):
        assert "Origin" in (folder / "README.md").read_text()
