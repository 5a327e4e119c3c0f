"""``GET /downloads/{format}/{captureId}``: an artefact behind a signed, expiring link."""

from __future__ import annotations

import shutil
import tarfile
import tempfile
from pathlib import Path

from fastapi import APIRouter, HTTPException
from fastapi.responses import FileResponse, Response
from starlette.background import BackgroundTask
from starlette.concurrency import run_in_threadpool

from ego_assets.api.context import Context
from ego_assets.api.links import artefact_name, is_file
from ego_assets.catalog.receipts import ExportReceipt, read_receipt
from ego_assets.dagster_client import export_target
from ego_assets.errors import CaptureKeyError
from ego_assets.storage import Storage, is_local

router = APIRouter()


@router.get("/downloads/{fmt}/{captureId}", name="download")
async def download(
    fmt: str,
    captureId: str,
    sha256: str,
    expires: int,
    sig: str,
    ctx: Context,
) -> Response:
    problem = ctx.signer.check(fmt, captureId, sha256, expires, sig)
    if problem is not None:
        raise HTTPException(403, problem)
    try:
        target = export_target(captureId, fmt)
    except (CaptureKeyError, KeyError) as exc:
        raise HTTPException(404, str(exc)) from exc
    storage = ctx.service.storage
    receipt = await run_in_threadpool(read_receipt, storage, target.format, target.partition_key)
    if receipt is None or receipt.sha256 != sha256:
        raise HTTPException(410, "this export was replaced or removed: ask for it again")
    return await run_in_threadpool(send_artefact, storage, receipt)


def send_artefact(storage: Storage, receipt: ExportReceipt) -> Response:
    """The artefact as a download: the file itself, or a folder as one tar."""
    location = storage.root / receipt.path
    name = artefact_name(receipt)
    headers = {"X-Content-SHA256": receipt.sha256} if is_file(receipt) else {}
    if is_file(receipt) and is_local(location):
        return FileResponse(Path(location.path), filename=name, headers=headers)
    tmp = Path(tempfile.mkdtemp(prefix="ego-download-"))
    cleanup = BackgroundTask(shutil.rmtree, tmp, ignore_errors=True)
    try:
        if is_file(receipt):
            with storage.read_file(location) as local:
                shutil.copyfile(local, tmp / name)
        else:
            with storage.read_dir(location) as folder, tarfile.open(tmp / name, "w") as tar:
                for path in sorted(p for p in folder.rglob("*") if p.is_file()):
                    tar.add(path, arcname=path.relative_to(folder).as_posix())
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return FileResponse(
        tmp / name,
        filename=name,
        media_type="application/octet-stream",
        headers=headers,
        background=cleanup,
    )
