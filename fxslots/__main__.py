"""``python -m fxslots explain MODULE:FACTORY --input SHAPE``: see ``fxslots.cli``."""

from .cli import main

raise SystemExit(main())
