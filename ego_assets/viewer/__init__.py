"""Episode viewer: a Rerun recording of one canonical trajectory and its quality report."""
