"""Download links of export artefacts.

* A single-file artefact on S3: a presigned ``GET`` URL from the client of dagster-aws's
  `S3Resource` (the object itself, ``Content-Disposition: attachment``), valid ``ttl_s``.
* Everything else (a file on local storage, a folder artefact anywhere, sent as one
  uncompressed tar, `ego_assets.api.tarball`):
  ``/downloads/<format>/<capture>?sha256=..&expires=..&sig=..`` served by the API
  itself. ``sig`` is an HMAC-SHA256 over format, capture, the SHA-256 of the bytes served
  (the file's, or the tar's) and the expiry, so a link is bound to one version of one
  artefact and stops working when it expires or when a new export replaces the artefact.

A link is a bearer capability: whoever holds it downloads that one version until it
expires, without a token (like a presigned S3 URL), hence its short default lifetime.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from ego_assets.catalog.receipts import ExportReceipt
from ego_assets.storage import Storage

MAX_EXPIRES = 10**12  # epoch s: a link's expiry beyond this is no link of ours


@dataclass(frozen=True)
class LinkSigner:
    secret: bytes
    ttl_s: int

    def _sig(self, fmt: str, capture: str, sha256: str, expires: int) -> str:
        message = f"{fmt}\n{capture}\n{sha256}\n{expires}".encode()
        return hmac.new(self.secret, message, hashlib.sha256).hexdigest()

    def local_url(self, fmt: str, capture: str, sha256: str, now: float | None = None) -> str:
        expires = int((now or time.time()) + self.ttl_s)
        query = urlencode(
            {"sha256": sha256, "expires": expires, "sig": self._sig(fmt, capture, sha256, expires)}
        )
        return f"/downloads/{fmt}/{capture}?{query}"

    def check(
        self, fmt: str, capture: str, sha256: str, expires: int, sig: str, now: float | None = None
    ) -> str | None:
        """None when the link is valid, else why not."""
        if not 0 <= expires < MAX_EXPIRES or len(fmt) + len(capture) + len(sha256) > 512:
            return "invalid link"
        expected = self._sig(fmt, capture, sha256, expires)
        if not hmac.compare_digest(sig.encode(), expected.encode()):
            return "invalid link signature"
        if expires < (now or time.time()):
            return "link expired"
        return None


def artefact_name(receipt: ExportReceipt) -> str:
    """The file name a download gets: the file's own, ``<capture>.<format>.tar`` for a folder."""
    name = receipt.path.rstrip("/").rsplit("/", 1)[-1]
    return name if is_file(receipt) else f"{receipt.capture_key}.{receipt.format}.tar"


def is_file(receipt: ExportReceipt) -> bool:
    """Whether the artefact is one file (exporters name files with a suffix, folders without)."""
    return receipt.files == 1 and "." in receipt.path.rsplit("/", 1)[-1]


class Presigner:
    """Presigned S3 URLs through a boto3 S3 client (made once; credentials and region
    from the usual AWS chain)."""

    def __init__(self, storage: Storage, ttl_s: int) -> None:
        import boto3

        endpoint = storage.storage_options.get("endpoint_url") or None
        self._client: Any = boto3.session.Session().client("s3", endpoint_url=endpoint)
        self._storage = storage
        self._ttl_s = ttl_s

    def url(self, receipt: ExportReceipt) -> str:
        location = self._storage.root / receipt.path
        bucket, _, key = location.path.partition("/")
        return str(
            self._client.generate_presigned_url(
                "get_object",
                Params={
                    "Bucket": bucket,
                    "Key": key,
                    "ResponseContentDisposition": (
                        f'attachment; filename="{artefact_name(receipt)}"'
                    ),
                },
                ExpiresIn=self._ttl_s,
            )
        )
