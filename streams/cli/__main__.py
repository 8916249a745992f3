"""``python -m streams.cli``, as the ``continuity-drift`` script."""

import sys

from streams.cli import main

sys.exit(main())
