"""The web pages of `opdb serve`, under /ui: the database at a glance, read-only; /docs.

Server-rendered HTML (Jinja2, autoescaped) over the same functions the JSON API's routes call, so
that a page shows what the API answers; a little JavaScript sorts tables and refreshes the jobs.
Every asset is served by the app: no CDN, nothing fetched at run time (docs/ui.md). ``/docs`` is
the API's reference rendered from its OpenAPI document (``api.ui.reference``).
"""

from typing import Any

from api.ui import errors, pages, reference
from api.ui.pages import router


def install(app: Any) -> None:
    """Mount the pages, their assets and the API's reference on ``app``."""
    pages.install(app)
    errors.install(app)
    reference.install(app)


__all__ = ["install", "router"]
