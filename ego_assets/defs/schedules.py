"""Nightly refresh of the unpartitioned aggregates (today: the quality catalog).

03:00 UTC, after the day's captures have landed and been processed. The schedule is
RUNNING by default: a refresh only reads one small Parquet row per episode and writes one
file under the single-writer pool, and a catalog that silently stops refreshing is worse
than one extra run a night. Merged datasets join `aggregates_job` through the
``aggregates`` group when they exist.
"""

import dagster as dg

from ego_assets.defs.aggregates import AGGREGATES_GROUP

NIGHTLY_CRON = "0 3 * * *"

aggregates_job = dg.define_asset_job(
    "aggregates_job",
    selection=dg.AssetSelection.groups(AGGREGATES_GROUP),
    description="Every unpartitioned aggregate over all captures.",
)

nightly_aggregates = dg.ScheduleDefinition(
    name="nightly_aggregates",
    job=aggregates_job,
    cron_schedule=NIGHTLY_CRON,
    execution_timezone="UTC",
    default_status=dg.DefaultScheduleStatus.RUNNING,
    description="Refreshes the quality catalog (and future merged datasets) every night.",
)
