"""The SQL store: ORM tables, engine and session factories, migrations and queries."""
