"""Concurrency pools shared by the Dagster layer and the deployment config.

A pool caps how many steps holding it run at once across the whole deployment
(``concurrency.pools`` in ``infra/dagster.yaml``; ``dagster instance concurrency set``).
"""

# Steps that write one shared artefact (the nightly merged datasets, a catalog file)
# must never overlap: the deployment sets this pool's limit to 1.
SINGLE_WRITER_POOL = "single_writer"
SINGLE_WRITER_LIMIT = 1
