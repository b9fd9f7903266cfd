"""The routes, one module per resource; each route is a few lines over library calls."""

from __future__ import annotations

from fastapi import APIRouter

from api.routes import configs, devices, jobs, llms, models, service, sources, specs

router = APIRouter()
for module in (service, specs, models, configs, jobs, devices, sources, llms):
    router.include_router(module.router)

__all__ = ["router"]
