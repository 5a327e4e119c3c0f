"""Export receipts: the row every exporter writes per episode and format."""

import datetime as dt
import hashlib
import json

import pytest

from ego_assets.catalog.receipts import (
    RECEIPT_SCHEMA,
    RECEIPT_VERSION,
    ExportReceipt,
    ReceiptError,
    folder_digest,
    make_receipt,
    read_receipt,
    receipt_location,
    receipts_table,
    record_export,
    write_receipt,
)
from ego_assets.errors import CaptureKeyError
from ego_assets.fileio import file_sha256, list_files
from ego_assets.storage import Storage

WHEN = dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.UTC)


def test_receipt_of_a_file_records_size_digest_and_versions(tmp_path):
    storage = Storage(tmp_path)
    artefact = storage.stage_path("exports", "ep-1") / "holos_hdf5" / "capture.h5"
    local = tmp_path / "exports" / "ep-1" / "holos_hdf5" / "capture.h5"
    local.parent.mkdir(parents=True)
    local.write_bytes(b"\x89HDF\r\n" + bytes(100))
    receipt = make_receipt(
        storage,
        export_format="holos_hdf5",
        capture_key="ep-1",
        location=artefact,
        local=local,
        code_version="holos-hdf5-1",
        input_data_version="q1:t1:abc",
        exported_at=WHEN,
    )
    assert receipt.path == "exports/ep-1/holos_hdf5/capture.h5"
    assert (receipt.bytes, receipt.files) == (106, 1)
    assert receipt.sha256 == hashlib.sha256(local.read_bytes()).hexdigest()
    assert receipt.exported_at == "2026-11-30T12:00:00.000000+00:00"
    location = write_receipt(storage, receipt)
    assert location.path == str(tmp_path / "receipts" / "holos_hdf5" / "ep-1.json")
    assert json.loads(location.read_text())["code_version"] == "holos-hdf5-1"
    assert read_receipt(storage, "holos_hdf5", "ep-1") == receipt
    assert read_receipt(storage, "ceres_episode", "ep-1") is None
    assert [p.name for p in (tmp_path / "receipts" / "holos_hdf5").iterdir()] == ["ep-1.json"]


def test_folder_digest_follows_the_manifest_rule(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "a.parquet").write_bytes(b"abc")
    (tmp_path / "meta.json").write_bytes(b"{}")
    size, files, digest = folder_digest(tmp_path)
    entries = [
        {"bytes": 3, "path": "data/a.parquet", "sha256": hashlib.sha256(b"abc").hexdigest()},
        {"bytes": 2, "path": "meta.json", "sha256": hashlib.sha256(b"{}").hexdigest()},
    ]
    expected = hashlib.sha256(json.dumps(entries, sort_keys=True).encode()).hexdigest()
    assert (size, files, digest) == (5, 2, expected)


def test_folder_digest_lists_files_in_path_order_and_reads_no_file_the_writer_hashed(
    tmp_path, monkeypatch
):
    """The file list is the one ``rglob`` gives, part by part (``a/b`` before ``a-b``),
    links to files included, linked folders not entered; files the writer hashed as it
    wrote them (``known``) are not read again, and the digest is the same."""
    from ego_assets.catalog import receipts

    for rel in ("a-b", "a/b", "a.b", "a/c/d", "A", "a b/c", "aa/b"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(rel.encode())
    (tmp_path / "to-a").symlink_to(tmp_path / "a", target_is_directory=True)
    (tmp_path / "to-b").symlink_to(tmp_path / "a-b")
    (tmp_path / "broken").symlink_to(tmp_path / "nothing")
    globbed = sorted(p for p in tmp_path.rglob("*") if p.is_file())
    assert list_files(tmp_path) == [p.relative_to(tmp_path).as_posix() for p in globbed]
    assert list_files(tmp_path)[:3] == ["A", "a/b", "a/c/d"]

    read = folder_digest(tmp_path)
    known = {rel: hashlib.sha256((tmp_path / rel).read_bytes()).hexdigest() for rel in ("a/b", "A")}
    hashed: list[str] = []
    monkeypatch.setattr(
        receipts, "file_sha256", lambda path: hashed.append(path.name) or file_sha256(path)
    )
    assert folder_digest(tmp_path, known) == read
    assert sorted(hashed) == sorted(["a-b", "a.b", "d", "c", "b", "to-b"])


def test_bad_receipts_are_refused_with_the_field_named(tmp_path):
    storage = Storage(tmp_path)
    with pytest.raises(ReceiptError, match="is not one of"):
        receipt_location(storage, "zip", "ep-1")
    with pytest.raises(CaptureKeyError):
        receipt_location(storage, "holos_hdf5", "../up")
    good = {
        "capture_key": "ep-1",
        "format": "holos_hdf5",
        "path": "exports/ep-1/capture.h5",
        "bytes": 1,
        "files": 1,
        "sha256": "0" * 64,
        "code_version": "c1",
        "input_data_version": "d1",
        "exported_at": WHEN.isoformat(),
    }
    # a version-1 body (no status, no reason) reads as an export
    old = ExportReceipt.from_json(json.dumps(good))
    assert (old.receipt_version, old.status, old.reason) == (RECEIPT_VERSION, "exported", "")
    with pytest.raises(ReceiptError, match="status must be one of"):
        ExportReceipt(**{**good, "status": "lost"})
    with pytest.raises(ReceiptError, match="a skipped receipt needs a reason"):
        ExportReceipt(**{**good, "status": "skipped"})
    with pytest.raises(ReceiptError, match="a skipped receipt needs a reason"):
        ExportReceipt(**{**good, "reason": "why"})
    with pytest.raises(ReceiptError, match="'sha256' is missing"):
        ExportReceipt.from_json(json.dumps({k: v for k, v in good.items() if k != "sha256"}))
    with pytest.raises(ReceiptError, match="relative to the data root"):
        ExportReceipt(**{**good, "path": "/abs/capture.h5"})
    with pytest.raises(ReceiptError, match="must be in UTC"):
        ExportReceipt(**{**good, "exported_at": "2026-11-30T12:00:00+02:00"})
    outside = Storage(tmp_path.parent).root / "x.h5"
    (tmp_path / "x.h5").write_bytes(b"x")
    with pytest.raises(ReceiptError, match="not below the data root"):
        make_receipt(
            storage,
            export_format="holos_hdf5",
            capture_key="ep-1",
            location=outside,
            local=tmp_path / "x.h5",
            code_version="c1",
            input_data_version="d1",
        )
    table = receipts_table([ExportReceipt(**good)])
    assert table.schema == RECEIPT_SCHEMA
    assert table["exported_at"].to_pylist() == [WHEN]
    assert receipts_table([]).num_rows == 0


def test_receipts_on_s3(s3_server, s3_bucket, tmp_path):
    storage = Storage(s3_bucket + "/root", storage_options=s3_server.storage_options)
    local = tmp_path / "shard"
    local.mkdir()
    (local / "episode.tar").write_bytes(b"t" * 10)
    receipt = record_export(
        storage,
        export_format="egosmith_shards",
        capture_key="ep-9",
        location=storage.stage_path("exports", "ep-9") / "egosmith",
        local=local,
        code_version="egosmith-1",
        input_data_version="d9",
    )
    assert receipt.path == "exports/ep-9/egosmith"
    assert s3_server.keys(s3_bucket + "/root") == ["receipts/egosmith_shards/ep-9.json"]
    assert read_receipt(storage, "egosmith_shards", "ep-9") == receipt
