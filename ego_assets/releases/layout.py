"""How a version's episodes are grouped into parts, and which parts a new version reuses.

A **part** is the episodes one version packed together: ``{"name": "v3", "episodes":
[capture keys in order]}``. Every format packs each part into files of its own (a part's
episodes never share a file with another part's), so a part whose episodes are unchanged
keeps its files from one version to the next: they are hard-linked, never rewritten.

`plan_parts` makes a new version's parts from the previous version's: a previous part
is kept, in its place, when each of its episodes is still selected and packs to the same
bytes (same split, same export SHA-256 of every release format); the episodes of the
other previous parts that are still selected, and every new episode, form one new part
named after the new version, in capture-key order. Without a compatible previous
version (none, another packer version or other packing options) there is one part.
The parts are written to the manifest, so a version can be packed again from it alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ego_assets.releases.select import ReleaseEpisode


@dataclass(frozen=True, slots=True)
class PartPlan:
    """A version's parts and what of the previous version's files it may reuse.

    ``kept``: names of parts packed exactly as in the version folder ``previous``
    (their per-part files can be linked from it); ``prefix``: how many leading parts
    are also at the same position there (files numbered across parts, such as LeRobot's,
    can be linked for those only).
    """

    parts: list[dict[str, Any]]
    previous: Path | None = None
    kept: frozenset[str] = frozenset()
    prefix: int = 0

    def ordered(self, episodes: Sequence[ReleaseEpisode]) -> list[ReleaseEpisode]:
        """``episodes`` in part order, then each part's own order."""
        by_key = {e.capture_key: e for e in episodes}
        return [by_key[k] for part in self.parts for k in part["episodes"]]

    def part_of(self) -> dict[str, str]:
        """Capture key -> part name."""
        return {k: part["name"] for part in self.parts for k in part["episodes"]}

    def reusable(self, part: str) -> Path | None:
        """The previous version's folder when ``part``'s files can be linked from it."""
        return self.previous if part in self.kept else None


def packed_as(record: dict[str, Any]) -> tuple[str, tuple[tuple[str, str], ...]]:
    """What an episode's packed bytes depend on: its split and its exports' SHA-256."""
    exports = record["exports"]
    return record["split"], tuple(sorted((f, exports[f]["sha256"]) for f in exports))


def plan_parts(
    episodes: Sequence[ReleaseEpisode],
    version: int,
    previous: dict[str, Any] | None = None,
    previous_folder: Path | None = None,
) -> PartPlan:
    """The parts of version ``version`` (see the module docstring); ``previous``: the
    latest version's manifest if it was packed by the same packer and options."""
    now = {e.capture_key: packed_as(e.record()) for e in episodes}
    parts: list[dict[str, Any]] = []
    placed: set[str] = set()
    if previous is not None and previous.get("parts"):
        before = {e["capture_key"]: packed_as(e) for e in previous["episodes"]}
        for part in previous["parts"]:
            if all(now.get(k) == before[k] for k in part["episodes"]):
                parts.append(part)
                placed.update(part["episodes"])
    kept = frozenset(p["name"] for p in parts)
    rest = sorted(k for k in now if k not in placed)
    if rest:
        parts.append({"name": f"v{version}", "episodes": rest})
    prefix = 0
    old = [p["name"] for p in previous["parts"]] if previous and previous.get("parts") else []
    while prefix < min(len(old), len(kept)) and parts[prefix]["name"] == old[prefix]:
        prefix += 1
    if not kept:
        return PartPlan(parts)
    return PartPlan(parts, previous_folder, kept, prefix)
