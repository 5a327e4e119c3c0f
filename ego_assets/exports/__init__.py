"""The export room: every export format's identity (`registry`) and the export steps.

Pure core: nothing here imports Dagster.
"""
