"""``python -m apollo.train``: one rank of a training run (see :mod:`apollo.train.cli`)."""

import logging
import os
import sys

from apollo.train.cli import main

rc = main()
if os.environ.get("WORLD_SIZE"):
    # A rank that finished (everything written, the last barrier passed, the process group destroyed) leaves
    # without running C++ destructors: a gloo/shm or ZeRO-3 comm thread still joinable at interpreter exit
    # aborts the process ("terminate called without an active exception", SIGABRT), which the launcher
    # reports as a failed run although the run completed (seen under load in tests/test_deepspeed_sft.py).
    sys.stdout.flush()
    sys.stderr.flush()
    logging.shutdown()
    os._exit(rc)
sys.exit(rc)
