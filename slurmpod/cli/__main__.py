"""``python -m slurmpod.cli``: the ``slurmpod`` command."""

import sys

from slurmpod.cli import main

sys.exit(main())
