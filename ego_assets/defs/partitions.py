"""One dynamic partition per capture (episode), and the platform's only ways to touch them.

Every caller that turns a capture key into a Dagster partition (the landing sensor, the
CLI, the stale-code sensor, the HTTP API) goes through `partition_for_capture`; every
caller that registers captures goes through `register_captures`. Both cost O(keys given),
never O(partitions registered): see ``docs/scale.md`` for why the platform avoids every
Dagster call that lists the whole definition (``get_dynamic_partitions``,
``get_partition_keys``) and how a million captures are served.
"""

from __future__ import annotations

from collections.abc import Sequence

import dagster as dg
from dagster._core.storage.tags import PARTITION_NAME_TAG, PARTITION_SET_TAG

from ego_assets.keys import validate_capture_key

CAPTURES_PARTITIONS_NAME = "captures"
captures_partitions = dg.DynamicPartitionsDefinition(name=CAPTURES_PARTITIONS_NAME)

# Keys per page when the platform walks the registered captures (stale-code sensor,
# migration): one bounded query per page.
PAGE_SIZE = 10_000


def partition_for_capture(capture_key: str) -> str:
    """The `captures` partition key of a capture (the key itself, validated)."""
    return validate_capture_key(capture_key)


def register_captures(instance: dg.DagsterInstance, capture_keys: Sequence[str]) -> list[str]:
    """Add the captures' partitions in one bulk insert (idempotent); returns their keys.

    One statement whatever the number of registered captures (Postgres: ``INSERT ... ON
    CONFLICT DO NOTHING``). A sensor that returns ``build_add_request`` instead makes the
    daemon check each key with its own query (and its own connection on Postgres, about
    40 ms per key on the benchmark machine) before the same insert.
    """
    keys = [partition_for_capture(k) for k in capture_keys]
    if keys:
        instance.add_dynamic_partitions(CAPTURES_PARTITIONS_NAME, keys)
    return keys


def capture_run_request(capture_key: str, job_name: str) -> dg.RunRequest:
    """A run of ``job_name`` over one capture's partition, already resolved (run key =
    capture key).

    The tags are the ones Dagster's own resolution adds (``dagster/partition`` and the
    job's partition set); giving them here skips the existence query per request Dagster
    would otherwise make for a key `register_captures` has just inserted.
    """
    key = partition_for_capture(capture_key)
    tags = {PARTITION_NAME_TAG: key, PARTITION_SET_TAG: f"{job_name}_partition_set"}
    return dg.RunRequest(run_key=capture_key, partition_key=key, tags=tags)


def page_captures(
    instance: dg.DagsterInstance, after: str | None, limit: int = PAGE_SIZE
) -> tuple[list[str], str | None]:
    """Registered capture keys in registration order after cursor ``after``: one page and
    the cursor for the next (None when this page was the last)."""
    page = instance.get_paginated_dynamic_partitions(
        CAPTURES_PARTITIONS_NAME, limit=limit, ascending=True, cursor=after
    )
    return list(page.results), page.cursor if page.has_more else None
