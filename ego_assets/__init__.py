"""ego_assets: egocentric human-demonstration captures to checked training data."""

__version__ = "0.1.0"
