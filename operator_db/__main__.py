"""``python -m operator_db``: the ``opdb`` command."""

import sys

from operator_db.cli.process_env import stop_while_starting

stop_while_starting(sys.argv)  # first: a worker stopped while it imports exits 0, not -15

from operator_db.cli.main import entry  # noqa: E402

entry()
