"""``python -m ego_assets.cli``: the `ego-assets` command."""

from ego_assets.cli import main

raise SystemExit(main())
