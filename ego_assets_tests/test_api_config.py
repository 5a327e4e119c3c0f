"""The export API's pieces that need no deployment: configuration, tokens, links, progress
phases and the capture -> (asset, partition) mapping (the HTTP routes: test_api.py)."""

from __future__ import annotations

import pytest

from ego_assets.api.config import ConfigError, hash_token, parse_config
from ego_assets.api.links import LinkSigner, artefact_name, is_file
from ego_assets.catalog.receipts import ExportReceipt
from ego_assets.defs.exports import export_target
from ego_assets.errors import CaptureKeyError
from ego_assets.exports import registry
from ego_assets.progress import export_fraction

SHA = "a" * 64


def _config(**orgs: dict) -> dict:
    return {"organizations": orgs}


def test_tokens_are_matched_by_digest_and_scoped_to_their_organization() -> None:
    config = parse_config(
        _config(
            holos={"captures": ["hv-*"], "tokens": {"ci": hash_token("secret-1")}},
            other={"captures": ["ot-*"], "tokens": {"ot": hash_token("secret-2")}},
        ),
        environ={"EGO_API_LINK_SECRET": "k"},
    )
    caller = config.caller("secret-1")
    assert caller is not None and (caller.token_id, caller.organization) == ("ci", "holos")
    assert config.caller("secret-3") is None
    assert config.owns(caller, "hv-0001") and not config.owns(caller, "ot-0001")
    assert config.link_secret == b"k"
    # only digests are kept
    assert "secret-1" not in repr(config.tokens)


@pytest.mark.parametrize(
    ("doc", "needle"),
    [
        ({}, "at least one organization"),
        (_config(a={"captures": ["x"], "tokens": {"t": "plain-token"}}), "sha256:"),
        (_config(a={"captures": ["x"], "tokens": {"t": "sha256:zz"}}), "not a SHA-256"),
        (_config(a={"captures": "x"}), "list of glob patterns"),
        (_config(a={"capture": ["x"]}), "unknown key 'capture'"),
        (
            _config(
                a={"tokens": {"t": hash_token("same")}}, b={"tokens": {"u": hash_token("same")}}
            ),
            "configured twice",
        ),
    ],
)
def test_bad_configurations_name_the_entry(doc: dict, needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        parse_config(doc, "api.toml", environ={})


def test_links_are_bound_to_artefact_and_expiry() -> None:
    signer = LinkSigner(b"key", ttl_s=60)
    url = signer.local_url("holos_hdf5", "hv-1", SHA, now=1000.0)
    query = dict(part.split("=") for part in url.split("?")[1].split("&"))
    expires, sig = int(query["expires"]), query["sig"]
    assert expires == 1060
    assert signer.check("holos_hdf5", "hv-1", SHA, expires, sig, now=1059) is None
    assert signer.check("holos_hdf5", "hv-1", SHA, expires, sig, now=1061) == "link expired"
    assert signer.check("holos_hdf5", "hv-1", "b" * 64, expires, sig, now=1000) is not None
    assert signer.check("holos_hdf5", "hv-2", SHA, expires, sig, now=1000) is not None
    assert LinkSigner(b"other", 60).check("holos_hdf5", "hv-1", SHA, expires, sig, 1000)


def _receipt(fmt: str, path: str, files: int) -> ExportReceipt:
    return ExportReceipt(
        capture_key="hv-1",
        format=fmt,
        path=path,
        bytes=10,
        files=files,
        sha256=SHA,
        code_version="v1",
        input_data_version="g1",
        exported_at="2026-12-01T10:00:00.000000+00:00",
    )


def test_artefact_names() -> None:
    h5 = _receipt("holos_hdf5", "exports/holos_hdf5/hv-1/hv-1.h5", 1)
    shard = _receipt("ceres_episode", "exports/ceres-lerobot-v3/hv-1/shards/episode-000003", 5)
    assert (artefact_name(h5), is_file(h5)) == ("hv-1.h5", True)
    assert (artefact_name(shard), is_file(shard)) == ("hv-1.ceres_episode.tar", False)


def test_export_phases_cover_zero_to_one_in_order() -> None:
    assert export_fraction("read", 0, 2) == 0.0
    assert export_fraction("read", 2, 2) == pytest.approx(0.1)
    assert export_fraction("write", 4, 8) == pytest.approx(0.5)
    assert export_fraction("upload", 1, 1) == pytest.approx(1.0)
    assert export_fraction("write", 9, 8) == pytest.approx(0.9)  # clamped
    assert export_fraction("hash", 1, 2) is None  # not an export phase


def test_export_target_is_the_one_mapping() -> None:
    target = export_target("hv-0001", "holos_hdf5")
    assert (target.partition_key, target.job_name) == ("hv-0001", "export_holos_hdf5")
    assert target.asset_key.to_user_string() == "holos_hdf5"
    assert set(registry.names()) == {"holos_hdf5", "ceres_episode", "egosmith_shards"}
    with pytest.raises(CaptureKeyError):
        export_target("../etc", "holos_hdf5")
    with pytest.raises(KeyError):
        export_target("hv-0001", "zip")
