"""The SQL store: ORM tables, engine and session factories, migrations and queries.

The ORM tables are ``models``, ``predictor_tables`` (the stored cost models), ``llm_tables``
(LLMs, their step models and generate() runs) and ``session_tables`` (the pages' sign-ins), each
in its own module; importing the package registers all in ``models.Base.metadata``.
"""

from operator_db.db import llm_tables as llm_tables
from operator_db.db import predictor_tables as predictor_tables
from operator_db.db import session_tables as session_tables
