"""``python -m apollo.train``: one rank of a training run (see :mod:`apollo.train.cli`)."""

import sys

from apollo.train.cli import main

sys.exit(main())
