"""``python -m operator_db``: the ``opdb`` command."""

from operator_db.cli.main import entry

entry()
