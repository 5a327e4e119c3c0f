"""One dynamic partition per capture (episode)."""

import dagster as dg

CAPTURES_PARTITIONS_NAME = "captures"
captures_partitions = dg.DynamicPartitionsDefinition(name=CAPTURES_PARTITIONS_NAME)
