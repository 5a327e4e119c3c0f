"""``GET /downloads/{format}/{captureId}``: an artefact behind a signed, expiring link.

The link names the SHA-256 of the bytes it serves (`ExportState`'s ``artifact.sha256``):
the file's own, or for a folder its tar's (`ego_assets.api.tarball`). A link of an
artefact that was replaced since answers 410.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from fastapi import APIRouter, HTTPException
from fastapi.responses import FileResponse, Response
from starlette.background import BackgroundTask
from starlette.concurrency import run_in_threadpool

from ego_assets.api.context import Context
from ego_assets.api.links import artefact_name, is_file
from ego_assets.api.service import tar_mtime
from ego_assets.api.tarball import HashingWriter, write_tar
from ego_assets.catalog.receipts import ExportReceipt, read_receipt
from ego_assets.dagster_client import export_target
from ego_assets.errors import CaptureKeyError
from ego_assets.storage import Storage, is_local

router = APIRouter()
REPLACED = "this export was replaced or removed: ask for it again"


@router.get("/downloads/{fmt}/{captureId}", name="download")
async def download(
    fmt: str, captureId: str, sha256: str, expires: int, sig: str, ctx: Context
) -> Response:
    problem = ctx.signer.check(fmt, captureId, sha256, expires, sig)
    if problem is not None:
        raise HTTPException(403, problem)
    try:
        target = export_target(captureId, fmt)
    except (CaptureKeyError, KeyError) as exc:
        raise HTTPException(404, "no such export") from exc
    storage = ctx.service.storage
    receipt = await run_in_threadpool(read_receipt, storage, target.format, target.partition_key)
    if receipt is None or (is_file(receipt) and receipt.sha256 != sha256):
        raise HTTPException(410, REPLACED)
    return await run_in_threadpool(send_artefact, storage, receipt, sha256)


def send_artefact(storage: Storage, receipt: ExportReceipt, sha256: str) -> Response:
    """The artefact as a download: the file itself, or a folder as one tar (410 unless
    its bytes have the SHA-256 the link names)."""
    location = storage.root / receipt.path
    name = artefact_name(receipt)
    headers = {"X-Content-SHA256": sha256}
    if is_file(receipt) and is_local(location):
        return FileResponse(Path(location.path), filename=name, headers=headers)
    tmp = Path(tempfile.mkdtemp(prefix="ego-download-"))
    cleanup = BackgroundTask(shutil.rmtree, tmp, ignore_errors=True)
    try:
        if is_file(receipt):
            with storage.read_file(location) as local:
                shutil.copyfile(local, tmp / name)
        else:
            with storage.read_dir(location) as folder, (tmp / name).open("wb") as out:
                writer = HashingWriter(out)
                write_tar(folder, writer, tar_mtime(receipt))  # type: ignore[arg-type]
            if writer.hexdigest() != sha256:
                raise HTTPException(410, REPLACED)
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
