"""The dataset catalog: export receipts, per-episode source rows staged into DuckDB, and
the dbt project in ``dbt/`` that builds the catalog models over them (docs/catalog.md)."""
