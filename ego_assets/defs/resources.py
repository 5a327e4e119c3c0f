"""Resources: the one storage resource over local folders and ``s3://`` URIs."""

import dagster as dg
from pydantic import Field

from ego_assets.storage import Storage


class StorageResource(dg.ConfigurableResource):
    """Where captures land and every stage is written (local folder or ``s3://bucket/prefix``)."""

    root: str = Field(description="local folder or s3://bucket/prefix for all stages")
    landing: str | None = Field(default=None, description="landing zone; default <root>/landing")
    endpoint_url: str | None = Field(default=None, description="S3 endpoint (moto, MinIO)")

    def get_storage(self) -> Storage:
        options = {"endpoint_url": self.endpoint_url} if self.endpoint_url else None
        return Storage(self.root, landing=self.landing, storage_options=options)
