"""Dataset releases: a named, versioned training set cut from the catalog (docs/releases.md).

Pure core, no Dagster: `spec` (the ``releases/<name>.toml`` spec), `select` (the spec
run against the catalog), `manifest` (``release.json``, diff), `webdataset` (packing),
`build` (versions), `cli` (``ego-assets release``).
"""
