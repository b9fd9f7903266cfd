"""``opdb demo``: the main job end to end on the embedded default (SQLite, CPU)."""

from __future__ import annotations

from pathlib import Path

from operator_db.cli.common import DatabaseOption, console, open_store
from operator_db.cli.ingest import summary_table
from operator_db.config import get_settings
from operator_db.db import queries
from operator_db.db.ingest import ingest_specs
from operator_db.errors import ConfigurationError
from operator_db.specs import expand_spec_paths, load_spec


def example_specs_dir() -> Path:
    """Return the example specs: packaged in a wheel, ``measurement_specs/`` in a checkout."""
    here = Path(__file__).resolve().parent.parent
    for candidate in (here / "_specs", here.parent / "measurement_specs"):
        if candidate.is_dir():
            return candidate
    raise ConfigurationError(f"example specs not found next to {here}")


def demo(db: DatabaseOption = None) -> None:
    """Ingest the shipped example specs and show what the database now holds."""
    settings = get_settings()
    files = expand_spec_paths([example_specs_dir()])
    specs = [load_spec(path, max_bytes=settings.max_spec_bytes) for path in files]
    store = open_store(db)
    console.print(f"database: {store.display_url}")
    try:
        with store.transaction() as session:
            results = ingest_specs(session, specs)
        console.print(summary_table(results))
        with store.transaction() as session:
            summaries = queries.model_summaries(session)
    finally:
        store.close()
    for s in summaries:
        console.print(
            f"{s.name}: {s.configs} configurations, {s.calls} operator calls, "
            f"{s.flops / 1e9:.2f} GFLOPs per {'step' if s.mode == 'training' else 'forward'}"
        )
