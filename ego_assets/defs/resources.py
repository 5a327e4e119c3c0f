"""Resources: the one storage resource over local folders and ``s3://`` URIs."""

from typing import Any

import dagster as dg
from pydantic import Field

from ego_assets.storage import Storage


class StorageResource(dg.ConfigurableResource):
    """Where captures land and every stage is written (local folder or ``s3://bucket/prefix``).

    On S3 the endpoint goes to s3fs as ``endpoint_url`` (unset: AWS, or whatever botocore
    reads from ``AWS_ENDPOINT_URL_S3``); credentials and region come from the usual AWS
    chain (``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``/``AWS_DEFAULT_REGION``, an
    instance or pod role). `ego_assets.definitions` fills the fields from ``EGO_DATA_DIR``,
    ``EGO_LANDING_DIR`` and ``EGO_S3_ENDPOINT_URL``.
    """

    root: str = Field(description="local folder or s3://bucket/prefix for all stages")
    landing: str | None = Field(default=None, description="landing zone; default <root>/landing")
    endpoint_url: str | None = Field(
        default=None, description="S3 API endpoint, e.g. http://127.0.0.1:9000 (MinIO, moto)"
    )

    def storage_options(self) -> dict[str, Any]:
        """fsspec options for remote locations (empty for AWS defaults)."""
        endpoint = (self.endpoint_url or "").strip()
        return {"endpoint_url": endpoint} if endpoint else {}

    def get_storage(self) -> Storage:
        return Storage(self.root, landing=self.landing, storage_options=self.storage_options())
