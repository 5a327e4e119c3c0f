"""A release's dataset card, ``README.md``, made from its manifest alone.

Hugging Face dataset-card front matter (YAML): ``license`` (the spec's licence line in
lower case when it is one identifier such as ``CC-BY-4.0``; otherwise ``other`` with the
line as ``license_name``), ``size_categories`` (by the number of episodes),
``task_categories: [robotics]`` and tags. Then the composition tables (episodes and hours
by task, device, demonstrator and split), the quality summary (verdicts, waivers with who
and why, episodes left out) and the notes (consent withdrawals: how many episodes of
whom were left out, when and why). No time of writing: the same manifest gives
the same card.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from typing import Any

LICENCE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.+-]*$")
SIZE_CATEGORIES = ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"))
CARD_FILE = "README.md"


def size_category(n: int) -> str:
    """Hugging Face's ``size_categories`` bucket of ``n`` examples."""
    for limit, label in SIZE_CATEGORIES:
        if n < limit:
            return label
    return "100K<n<1M" if n < 1_000_000 else "n>1M"


def front_matter(manifest: dict[str, Any]) -> dict[str, Any]:
    """The card's YAML front matter as a dict."""
    licence = manifest["licence"]
    meta: dict[str, Any] = {}
    if LICENCE_ID.fullmatch(licence):
        meta["license"] = licence.lower()
    else:
        meta["license"] = "other"
        meta["license_name"] = licence
    meta["size_categories"] = [size_category(len(manifest["episodes"]))]
    meta["task_categories"] = ["robotics"]
    meta["tags"] = ["egocentric", "human-demonstration", *sorted(manifest["formats"])]
    meta["pretty_name"] = f"{manifest['release']} v{manifest['version']}"
    return meta


def yaml_lines(meta: dict[str, Any]) -> list[str]:
    """``meta`` (strings and lists of strings) as YAML block lines; every string is written
    JSON-quoted, which YAML reads as a double-quoted scalar."""
    lines = []
    for key in sorted(meta):
        value = meta[key]
        if isinstance(value, list):
            lines.append(f"{key}:")
            lines += [f"- {json.dumps(item)}" for item in value]
        else:
            lines.append(f"{key}: {json.dumps(value)}")
    return lines


def _table(manifest: dict[str, Any], column: str) -> list[str]:
    """Episodes and hours per value of ``column`` (absent: ``(none)``), largest first."""
    episodes: dict[str, int] = defaultdict(int)
    seconds: dict[str, float] = defaultdict(float)
    for e in manifest["episodes"]:
        value = e.get(column) or "(none)"
        episodes[value] += 1
        seconds[value] += e.get("duration_s") or 0.0
    rows = sorted(episodes, key=lambda v: (-seconds[v], v))
    lines = [f"| {column} | episodes | hours |", "|---|---:|---:|"]
    lines += [f"| {v} | {episodes[v]} | {seconds[v] / 3600:.3f} |" for v in rows]
    return lines


def _actions_section(actions: dict[str, Any]) -> list[str]:
    """The card's "State and actions" section (a derived action space)."""
    space = actions["space"]
    lines = ["## State and actions", "", actions["describe"], ""]
    lines += ["| setting | value |", "|---|---|"]
    lines += [f"| {k} | {json.dumps(space[k])} |" for k in space]
    lines += [
        "",
        f"State: {len(actions['state_names'])} values per sample "
        f"(`{actions['state_names'][0]}` ... `{actions['state_names'][-1]}`); "
        f"action: {len(actions['action_names'])} "
        f"(`{actions['action_names'][0]}` ... `{actions['action_names'][-1]}`). "
        "A hand not tracked at a sample is NaN with its valid flag false, never a zero pose. "
        "Rotation: "
        + (
            "rot6d, the first two columns of the wrist rotation (R00 R10 R20 R01 R11 R21)."
            if space["rotation"] == "rot6d"
            else "quaternion xyzw (w >= 0)."
        ),
    ]
    sources = actions.get("sources", {})
    for axes in sources.get("frame_axes", []):
        lines.append(f"Frame axes: {axes}.")
    for how in sources.get("head_axes_from", []):
        lines.append(f"Head pose from {how}.")
    if sources.get("joint_sets"):
        lines += ["", "| joint set | hands | component | how |", "|---|---:|---|---|"]
        for name, entry in sources["joint_sets"].items():
            for component, how in sorted(entry["components"].items()):
                lines.append(f"| {name} | {entry['hands']} | {component} | {how} |")
    return lines


def dataset_card(manifest: dict[str, Any]) -> str:
    """The ``README.md`` text of a release version (see the module docstring)."""
    spec = manifest["spec"]
    lines = ["---", *yaml_lines(front_matter(manifest)), "---", ""]
    lines += [f"# {manifest['release']} v{manifest['version']}", ""]
    if spec["release"]["description"]:
        lines += [spec["release"]["description"], ""]
    hours = sum(e.get("duration_s") or 0.0 for e in manifest["episodes"]) / 3600
    lines += [
        f"{len(manifest['episodes'])} episodes, {hours:.3f} hours. "
        f"Licence: {manifest['licence']}. Formats: {', '.join(sorted(manifest['formats']))}. "
        "Every episode's lineage and every file's SHA-256 are in `release.json`.",
        "",
        "## Composition",
    ]
    for column in ("split", "task", "device", "demonstrator"):
        lines += ["", *_table(manifest, column)]
    verdicts: dict[str, int] = defaultdict(int)
    for e in manifest["episodes"]:
        verdicts[e["gate"]["quality"]] += 1
    lines += ["", "## Quality", "", "| quality verdict | episodes |", "|---|---:|"]
    lines += [f"| {v} | {verdicts[v]} |" for v in sorted(verdicts)]
    waived = [e for e in manifest["episodes"] if e["gate"]["waived"]]
    lines += ["", f"Episodes let through by a waiver: {len(waived)}."]
    for e in waived:
        for w in e["gate"]["waivers"]:
            who, why = w.get("by", "?"), w.get("reason", "?")
            lines.append(f"- {e['capture_key']}: {w.get('metric', '?')} waived by {who}: {why}")
    left_out = [e for e in manifest.get("left_out", []) if "withdrawal" not in e]
    lines += [
        "",
        f"Selected but left out (no current export of a release format): {len(left_out)}.",
    ]
    lines += [f"- {item['capture_key']}: {item['reason']}" for item in left_out]
    if manifest.get("actions"):
        lines += ["", *_actions_section(manifest["actions"])]
    if manifest.get("notes"):
        lines += ["", "## Notes", ""]
        lines += [f"- {note}" for note in manifest["notes"]]
    return "\n".join(lines) + "\n"
