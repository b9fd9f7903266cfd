"""The routes, one module per resource; each route is a few lines over library calls."""

from __future__ import annotations

from fastapi import APIRouter

from api.routes import configs, devices, jobs, llms, models, service, sources, specs

MODULES = (service, specs, models, configs, jobs, devices, sources, llms)
"""The resource modules, each with its ``router``."""
router = APIRouter()
for module in MODULES:
    router.include_router(module.router)

__all__ = ["MODULES", "router"]
