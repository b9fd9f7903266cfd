"""The web pages of `opdb serve`, under /ui: the database at a glance, read-only.

Server-rendered HTML (Jinja2, autoescaped) over the same functions the JSON API's routes call, so
that a page shows what the API answers; a little JavaScript sorts tables and refreshes the jobs.
Every asset is served by the app: no CDN, nothing fetched at run time (docs/ui.md).
"""

from api.ui.pages import install, router

__all__ = ["install", "router"]
