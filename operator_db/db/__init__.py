"""The SQL store: ORM tables, engine and session factories, migrations and queries.

The ORM tables are ``models`` and ``predictor_tables`` (the stored cost models, in their own
module); importing the package registers both in ``models.Base.metadata``.
"""

from operator_db.db import predictor_tables as predictor_tables
