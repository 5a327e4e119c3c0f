"""A release spec run against the catalog: the episodes, their split and their lineage.

The query reads the dbt model ``episodes`` and, for what the model leaves in the staged
tables, ``platform.trajectory_headers`` (the trajectory digest), ``platform.quality_gates``
(the gate's data version) and ``platform.export_receipts_<format>`` (each export's path
and SHA-256). The catalog is opened read-only. An episode the spec selects but whose
export of one of the release's formats is not current (``<format>_state`` other than
``exported``: missing, stale, skipped, blocked) is left out, with that reason.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb

from ego_assets.releases.spec import ReleaseSpec, assign_split


class SelectionError(ValueError):
    """The spec could not be run against the catalog (the message names the spec key)."""


@dataclass(frozen=True, slots=True)
class ReleaseEpisode:
    """One selected episode: its split and everything the manifest records about it.

    ``exports`` maps a registry format name to ``{path, sha256, bytes, code_version}``
    (``path`` relative to the data root); ``gate`` holds the decision, policy version,
    gate data version, quality verdict, blocking reasons and waivers (who, why).
    """

    capture_key: str
    split: str
    task: str | None
    source_kind: str | None
    device: str | None
    demonstrator: str | None
    duration_s: float | None
    trajectory_digest: str | None
    gate: dict[str, Any]
    exports: dict[str, dict[str, Any]]

    def record(self) -> dict[str, Any]:
        """The episode's manifest entry (plain JSON values)."""
        return {
            "capture_key": self.capture_key,
            "split": self.split,
            "task": self.task,
            "source_kind": self.source_kind,
            "device": self.device,
            "demonstrator": self.demonstrator,
            "duration_s": self.duration_s,
            "trajectory_digest": self.trajectory_digest,
            "gate": self.gate,
            "exports": self.exports,
        }


@dataclass(frozen=True, slots=True)
class SelectionResult:
    """The episodes of a release in capture-key order, and the selected ones left out."""

    episodes: list[ReleaseEpisode]
    left_out: list[dict[str, str]] = field(default_factory=list)  # {capture_key, reason}
    notes: list[str] = field(default_factory=list)  # release notes (consent withdrawals)


def _query(spec: ReleaseSpec) -> tuple[str, list[Any]]:
    sel = spec.selection
    formats = spec.export_names()
    conditions = ["true"]
    params: list[Any] = []
    for column, values in sel.lists.items():
        conditions.append(f"list_contains(?, e.{column})")
        params.append(list(values))
    if sel.captured_from is not None:
        conditions.append("cast(e.started_at as date) >= ?")
        params.append(sel.captured_from)
    if sel.captured_to is not None:
        conditions.append("cast(e.started_at as date) <= ?")
        params.append(sel.captured_to)
    if sel.waived is not None:
        conditions.append("e.waived = ?")
        params.append(sel.waived)
    source = f"(select * from episodes where ({sel.where}))" if sel.where else "episodes"
    columns = [
        f"e.{fmt}_state as {fmt}_state, r_{fmt}.path as {fmt}_path, "
        f"r_{fmt}.sha256 as {fmt}_sha256, r_{fmt}.bytes as {fmt}_bytes, "
        f"r_{fmt}.code_version as {fmt}_code_version, e.{fmt}_skip_reason as {fmt}_skip"
        for fmt in formats
    ]
    joins = [
        f"left join platform.export_receipts_{fmt} r_{fmt} using (capture_key)" for fmt in formats
    ]
    sql = f"""
select e.capture_key, e.task, e.source_kind, e.device, e.demonstrator, e.duration_s,
       e.quality_status, e.gate, e.policy_version, e.blocking_reasons, e.waived, e.waivers,
       h.trajectory_data_version, g.gate_data_version, {", ".join(columns)}
from {source} e
left join platform.trajectory_headers h using (capture_key)
left join platform.quality_gates g using (capture_key)
{chr(10).join(joins)}
where {" and ".join(conditions)}
order by e.capture_key
"""
    return sql, params


def select_episodes(database: Path, spec: ReleaseSpec) -> SelectionResult:
    """Run ``spec`` against the catalog file ``database`` (read-only).

    Raises:
        SelectionError: no catalog there, or the spec's ``select.where`` is not valid SQL
            over ``episodes``.
    """
    if not Path(database).is_file():
        raise SelectionError(f"no catalog at {database}: run `ego-assets catalog --build` first")
    sql, params = _query(spec)
    try:
        with duckdb.connect(str(database), read_only=True) as con:
            rows = con.execute(sql, params).fetchall()
            names = [d[0] for d in con.description or ()]
    except duckdb.Error as exc:
        first = str(exc).splitlines()[0]
        what = "select.where" if spec.selection.where else "the catalog query"
        raise SelectionError(f"release {spec.name}: {what}: {first}") from None
    episodes: list[ReleaseEpisode] = []
    left_out: list[dict[str, str]] = []
    group_of = {"episode": "capture_key", "demonstrator": "demonstrator", "task": "task"}
    for values in rows:
        row = dict(zip(names, values, strict=True))
        missing = [
            f"{fmt}: {row[f'{fmt}_state']}"
            + (f" ({row[f'{fmt}_skip']})" if row[f"{fmt}_skip"] else "")
            for fmt in spec.export_names()
            if row[f"{fmt}_state"] != "exported"
        ]
        if missing:
            left_out.append({"capture_key": row["capture_key"], "reason": "; ".join(missing)})
            continue
        episodes.append(
            ReleaseEpisode(
                capture_key=row["capture_key"],
                split=assign_split(spec.split, row[group_of[spec.split.by]]),
                task=row["task"],
                source_kind=row["source_kind"],
                device=row["device"],
                demonstrator=row["demonstrator"],
                duration_s=row["duration_s"],
                trajectory_digest=row["trajectory_data_version"],
                gate={
                    "decision": row["gate"],
                    "quality": row["quality_status"],
                    "policy_version": row["policy_version"],
                    "data_version": row["gate_data_version"],
                    "blocking_reasons": list(row["blocking_reasons"] or []),
                    "waived": bool(row["waived"]),
                    "waivers": json.loads(row["waivers"]) if row["waivers"] else [],
                },
                exports={
                    fmt: {
                        "path": row[f"{fmt}_path"],
                        "sha256": row[f"{fmt}_sha256"],
                        "bytes": row[f"{fmt}_bytes"],
                        "code_version": row[f"{fmt}_code_version"],
                    }
                    for fmt in spec.export_names()
                },
            )
        )
    return SelectionResult(episodes, left_out)
