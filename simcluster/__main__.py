"""``python -m simcluster`` is the ``simcluster`` command."""

import sys

from .cli import main

sys.exit(main())
