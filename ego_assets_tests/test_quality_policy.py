"""Export policy, gate decisions and waivers, without Dagster."""

from __future__ import annotations

import json

import pytest

from ego_assets import pipeline
from ego_assets.cli import main
from ego_assets.exports.registry import policy_keys
from ego_assets.quality.expectations import ExpectationResults
from ego_assets.quality.gate import ExportBlockedError, Gate, require_gate
from ego_assets.quality.policy import Policy, default_policy
from ego_assets.quality.report import MetricResult, QualityReport
from ego_assets.quality.waivers import WAIVERS_FILE, add_waiver, read_waivers, revoke_waiver
from ego_assets.storage import Storage


def _report(*metrics: MetricResult) -> QualityReport:
    order = {"pass": 0, "warn": 1, "fail": 2}
    worst = max(metrics, key=lambda m: order[m.status])
    return QualityReport(
        "cap",
        "webxr",
        "r",
        1,
        worst.status,
        worst.key,
        (),
        (),
        None,
        None,
        metrics,  # type: ignore[arg-type]
    )


GAP = MetricResult("longest_gap_s", "stream:head", 53.4, "s", "fail", 0.5, 2.0, "max")
LOSS = MetricResult("tracking_loss_ratio", "hand:left", 0.2, "1", "warn", 0.1, 0.5, "max")


def test_default_policy_blocks_every_export_on_fail_and_nothing_on_warn() -> None:
    policy = default_policy()
    assert policy.version == 1
    assert policy.blocks("longest_gap_s", "stream:head/longest_gap_s", "fail") == policy_keys()
    assert policy.blocks("tracking_loss_ratio", "hand:left/tracking_loss_ratio", "warn") == ()


def test_gate_records_policy_version_reasons_and_blocked_exports() -> None:
    gate = Gate.build(_report(GAP, LOSS), ExpectationResults(()), "v1", default_policy())
    assert not gate.passed and gate.policy_version == 1
    assert gate.blocked_exports == policy_keys()
    assert gate.reasons == ("stream:head/longest_gap_s = 53.4 s (fail > 2 s)",)
    assert [f.status for f in gate.findings] == ["fail", "warn"]
    assert gate.summary() == (
        "quality: fail — export: blocked (stream:head/longest_gap_s = 53.4 s (fail > 2 s))"
    )
    with pytest.raises(ExportBlockedError, match="export policy v1: stream:head/longest_gap_s"):
        require_gate(gate, "cap")
    assert Gate.from_json(gate.to_json()) == gate


def test_gate_json_names_the_blocked_exports_both_ways_and_old_gates_still_read() -> None:
    """#35: ``blocked_exports`` in the policy's names and ``blocked_assets`` beside it in
    the names the Dagster assets and the API use, in the same order; a gate stored
    before ``blocked_assets`` existed reads as the same gate."""
    policy = Policy.from_dict(
        {
            "version": 7,
            "rules": [{"level": "fail", "metrics": ["*"], "exports": ["lerobot", "robomimic"]}],
        }
    )
    gate = Gate.build(_report(GAP, LOSS), ExpectationResults(()), "v", policy)
    doc = json.loads(gate.to_json())
    assert doc["blocked_exports"] == ["lerobot", "robomimic"]
    assert doc["blocked_assets"] == ["ceres_episode", "holos_hdf5"]
    assert gate.blocked_assets == ("ceres_episode", "holos_hdf5")
    del doc["blocked_assets"]  # as gates were written before
    assert Gate.from_json(json.dumps(doc)) == gate
    allowed = Gate.build(_report(LOSS), ExpectationResults(()), "v", policy)
    assert json.loads(allowed.to_json())["blocked_assets"] == []


def test_a_rule_can_block_one_export_for_one_metric_at_warn() -> None:
    policy = Policy.from_dict(
        {
            "version": 7,
            "rules": [
                {"level": "warn", "metrics": ["tracking_loss_ratio"], "exports": ["lerobot"]}
            ],
        }
    )
    gate = Gate.build(_report(GAP, LOSS), ExpectationResults(()), "v", policy)
    assert gate.blocked_exports == ("lerobot",)
    assert gate.allows("webdataset") and not gate.allows("lerobot") and not gate.allows()
    with pytest.raises(ValueError, match="unknown exports"):
        Policy.from_dict(
            {"version": 1, "rules": [{"level": "fail", "metrics": ["*"], "exports": ["tar"]}]}
        )


def test_waivers_are_recorded_read_and_revoked(tmp_path) -> None:
    store = Storage(tmp_path)
    waiver = add_waiver(store, "cap", "longest_gap_s", "two recordings joined", "ana")
    assert read_waivers(store) == (waiver,)
    gate = Gate.build(_report(GAP), ExpectationResults(()), "v", default_policy(), (waiver,))
    assert gate.passed and gate.reasons == ()
    assert (
        gate.summary()
        == "quality: fail — export: allowed (waived: stream:head/longest_gap_s by ana)"
    )
    (landing := tmp_path / "landing").mkdir()
    (landing / WAIVERS_FILE).write_text((tmp_path / WAIVERS_FILE).read_text())
    assert len(read_waivers(store)) == 2  # the landing zone's file is read as well
    revoked = revoke_waiver(store, "cap", "longest_gap_s", "ben")
    assert revoked.revoked_by == "ben"
    saved = json.loads((tmp_path / WAIVERS_FILE).read_text())
    assert saved["waivers"] == [] and saved["revoked"][0]["by"] == "ana"
    with pytest.raises(KeyError):
        revoke_waiver(store, "cap", "longest_gap_s", "ben")
    with pytest.raises(ValueError, match="reason"):
        add_waiver(store, "cap", "longest_gap_s", " ", "ana")


def test_cli_waive_rejudges_the_stored_gate(tmp_path, capsys) -> None:
    store = Storage(tmp_path)
    (tmp_path / "trajectory" / "cap").mkdir(parents=True)
    (tmp_path / "trajectory" / "cap" / pipeline.LINEAGE_FILE).write_text('{"data_version": "t1"}')
    (tmp_path / "quality" / "cap").mkdir(parents=True)
    gate = Gate.build(_report(GAP), ExpectationResults(()), "old", default_policy())
    (tmp_path / "quality" / "cap" / "gate.json").write_text(gate.to_json())
    args = ["waive", "cap", "stream:head/longest_gap_s", "--by", "ana", "--data", str(tmp_path)]
    assert main([*args, "--reason", "known gap"]) == 0
    out = capsys.readouterr().out
    assert "quality: fail — export: allowed (waived: stream:head/longest_gap_s by ana)" in out
    stored = pipeline.stored_gate(store, "cap")
    assert (
        stored is not None
        and stored.passed
        and stored.data_version.endswith(
            pipeline._quality_data_version(store, "cap")[0].rsplit(":", 1)[1]
        )
    )
    assert main([*args, "--revoke"]) == 0
    out = capsys.readouterr().out
    assert "export: blocked" in out
    blocked = pipeline.stored_gate(store, "cap")
    assert blocked is not None and blocked.reasons
    # each blocking reason whole on its own line, not only the summary's first ones
    assert [f"  blocked by {r}" for r in blocked.reasons] == out.splitlines()[2:]
    assert main(["waive", "cap", "x", "--by", "ana", "--data", str(tmp_path)]) == 2  # no reason
