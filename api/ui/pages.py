"""The pages under /ui: overview, models, model, model across GPUs, jobs, job, configuration.

A login where needed. Each page calls the JSON API's own route functions (or the queries they
call), so that what a page shows is what the API answers for the same question.
"""

from __future__ import annotations

import time
from collections import defaultdict
from pathlib import Path
from typing import Annotated, Any, Literal, cast
from urllib.parse import quote

from fastapi import APIRouter, Depends, Form, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from jinja2 import Environment, FileSystemLoader, select_autoescape

from api.deps import (
    FIGURE_TURN,
    Credentials,
    ReadSessionDep,
    SessionDep,
    get_settings_dep,
    server_tokens,
    token_right,
)
from api.limits import EXPENSIVE, login_limited
from api.routes import configs, devices, jobs, llms, models
from api.routes.common import Name, Offset
from api.routes.jobs import JobId
from api.routes.sources import source_name
from api.schemas import DeviceKindOut, HostOut, PeakOut
from api.security import same_origin
from api.ui import context, trust
from api.ui import format as fmt
from api.ui.session import COOKIE, SESSION_S, session_right, sign_in, sign_out
from api.ui.svg import compare_svg, lines_svg, time_series_svg
from operator_db.config import Settings
from operator_db.db import queries, queue
from operator_db.db.models import JOB_STATUSES
from operator_db.errors import InvalidInputError, NotFoundError

HERE = Path(__file__).resolve().parent
JOBS_PAGE = 100
"""Jobs the jobs page lists (newest first)."""
MEASUREMENTS_PAGE = 200
"""Results a configuration's page lists and charts (newest first)."""
NEWEST = 20
"""Results the overview lists."""

templates = Environment(
    loader=FileSystemLoader(HERE / "templates"),
    autoescape=select_autoescape(("html",)),
    trim_blocks=True,
    lstrip_blocks=True,
)
templates.filters.update(fmt.FILTERS, url=quote)
templates.globals["dash"] = fmt.DASH


class LoginRequiredError(Exception):
    """Reads need a token and the browser sent none that is valid: go to the login page."""


def ui_read(
    request: Request,
    settings: Annotated[Settings, Depends(get_settings_dep)],
    session: ReadSessionDep,
    credentials: Credentials = None,
) -> None:
    """Let a page be read: always where reads are open, else with a valid token.

    The token comes from the ``Authorization: Bearer`` header (the API's scheme), or the sign-in
    cookie stands for one (``api.ui.session``, looked up in the page's own read session).
    """
    if not settings.api_protect_reads:
        return
    if credentials:
        right = token_right(settings, credentials.credentials)
    else:
        right = session_right(settings, session, request.cookies.get(COOKIE), time.time())
    if right is None:
        raise LoginRequiredError


router = APIRouter(prefix="/ui", include_in_schema=False)
pages = APIRouter(dependencies=[Depends(ui_read)])


def render(request: Request, name: str, status_code: int = 200, **context: Any) -> HTMLResponse:
    """Render template ``name`` with ``context``; every page gets the request and the nav."""
    signed_in = COOKIE in request.cookies  # offers the sign-out
    html = templates.get_template(name).render(request=request, signed_in=signed_in, **context)
    return HTMLResponse(html, status_code=status_code)


@pages.get("/", response_class=HTMLResponse)
def overview(request: Request, session: ReadSessionDep) -> HTMLResponse:
    """Device kinds (spec sheet, sources, peaks, hosts), the data sets, queue, models, results."""
    kinds = devices.list_device_kinds(session)
    # Hosts and peaks as the kind's route reads them; its per-kind count of results is
    # already in the list's sources (counted once for all kinds).
    stored = queries.device_kinds(session)
    peaks = {
        k.name: [
            PeakOut.model_validate(p, from_attributes=True)
            for p in queries.peak_rows(session, k.id)
        ]
        for k in stored
    }
    spec = context.spec_peaks(session, [k for k in stored if peaks[k.name]])
    hosts: dict[str, list[HostOut]] = defaultdict(list)
    for host in devices.list_hosts(session):
        hosts[host.device_kind].append(host)
    counts: dict[str, dict[str, int]] = defaultdict(dict)
    totals: dict[str, int] = defaultdict(int)
    for kind, status, n in queue.queue_counts_by_kind(session):
        counts[kind][status] = n
        totals[status] += n
    newest = queries.newest_measurements(session, limit=NEWEST)
    names = queries.data_source_names(session)
    origin = queries.result_sources(session, [r.id for r in newest]) if names else {}
    return render(
        request,
        "overview.html",
        kinds=kinds,
        peaks=peaks,
        spec=spec,
        hosts=hosts,
        data_sets=_data_sets(kinds),
        counts=counts,
        totals=totals,
        statuses=JOB_STATUSES,
        measured=queries.models_measured_per_kind(session),
        models_total=queries.model_count(session),
        newest=newest,
        newest_sources={i: source_name(s, names) for i, s in origin.items()},
    )


def _data_sets(kinds: list[DeviceKindOut]) -> list[dict[str, Any]]:
    """Return each data set the kinds' results come from, with its totals over the kinds."""
    found: dict[str, dict[str, Any]] = {}
    for kind in kinds:
        for s in kind.sources:
            if not s.imported:
                continue
            entry = found.setdefault(s.source, {"source": s, "results": 0, "runs": 0, "kinds": []})
            entry["results"] += s.results
            entry["runs"] += s.model_runs
            if s.results or s.model_runs:
                entry["kinds"].append(kind.name)
    return [found[name] for name in sorted(found)]


MODELS_PAGE = 50
"""Models the models page lists at a time (by name)."""


@pages.get("/models", response_class=HTMLResponse)
def models_page(
    request: Request,
    session: ReadSessionDep,
    search: Annotated[str | None, Query(max_length=200)] = None,
    not_measured_on: Annotated[str | None, Query(max_length=200)] = None,
    offset: Offset = 0,
) -> HTMLResponse:
    """List every stored model, measured or not, with its state on every device kind.

    ``not_measured_on`` (a kind; empty: any) keeps the models with nothing measured there.
    """
    page = models.list_models(
        session,
        limit=MODELS_PAGE,
        offset=offset,
        search=search or None,
        not_measured_on=not_measured_on or None,
    )
    kinds = [k.name for k in queries.device_kinds(session)]
    return render(
        request,
        "models.html",
        models=page.items,
        states={m.name: trust.kind_states(m.configs, m.device_kinds, kinds) for m in page.items},
        kinds=kinds,
        total=page.total,
        offset=offset,
        size=MODELS_PAGE,
        search=search or "",
        not_measured_on=not_measured_on or "",
    )


@pages.get("/models/{name}", response_class=HTMLResponse, dependencies=EXPENSIVE)
def model_page(
    request: Request,
    name: str,
    session: ReadSessionDep,
    settings: Annotated[Settings, Depends(get_settings_dep)],
    device_kind: Annotated[str | None, Query(max_length=200)] = None,
    predict: bool = False,
) -> HTMLResponse:
    """Show a model: each kind it has figures on, its estimate against its run, side by side.

    The kinds come fastest first: by the whole-model run where one is measured, else by the
    estimate (as the comparison across GPUs ranks them). For the chosen kind (``device_kind``,
    else the fastest): the breakdown by operator type, the
    roofline and the configurations with their figures' sources; with ``predict``, its
    configurations not measured there are predicted by the kind's newest predictor (the API's
    ``predict=true``).
    """
    predicted_note = None
    detail = models.get_model(name, session)
    kinds = [k.device_kind for k in detail.device_kinds]
    # A kind asked for without figures is said to be so, never replaced by another kind.
    missing = device_kind if device_kind and device_kind not in kinds else None
    asked = device_kind if device_kind in kinds else None
    estimates: dict[str, Any] = context.kind_summaries(
        session, name, [k for k in kinds if k != asked], settings.estimate_between_ops_warn
    )
    chosen = asked
    if chosen is None and kinds and not missing:
        chosen = min(kinds, key=lambda kind: context.rank_s(estimates[kind]))
    if chosen is not None:
        try:
            estimates[chosen] = models.get_estimate(
                name, session, settings, device_kind=chosen, predict=predict, limit=1000
            )
        except NotFoundError as exc:  # no predictor on the kind: say so, show the measured
            predicted_note = str(exc)
            estimates[chosen] = models.get_estimate(
                name, session, settings, device_kind=chosen, limit=1000
            )
    estimate = estimates.get(chosen) if chosen else None
    kinds.sort(key=lambda kind: context.rank_s(estimates[kind]))
    # "Predict" is offered only where a predictor can answer (pandas and scikit-learn aside).
    from operator_db.predict.mix import can_predict

    predictable = chosen is not None and can_predict(session, chosen)
    return render(
        request,
        "model.html",
        model=detail,
        kinds=kinds,
        estimates=estimates,
        chosen=chosen,
        missing=missing,
        estimate=estimate,
        predict=predict,
        predictable=predictable,
        predicted_note=predicted_note,
        **context.trust_of(session, name, estimate),
    )


@pages.get("/models/{name}/compare", response_class=HTMLResponse, dependencies=EXPENSIVE)
def compare_page(request: Request, name: str, session: ReadSessionDep) -> HTMLResponse:
    """Which GPU for this model: its time on every kind, measured or predicted, fastest first.

    The API's ``GET /models/{name}/compare`` as a table and a bar chart with the intervals; where
    no cross-device model is stored, a hint to train one.
    """
    compared, cross = models.compare_model(session, name)
    return render(
        request,
        "compare.html",
        model=compared.model,
        rows=compared.rows,
        chart=compare_svg(compared.model, compared.rows),
        left_out=compared.left_out,
        cross=cross,
    )


@pages.get("/llms", response_class=HTMLResponse)
def llms_page(request: Request, session: ReadSessionDep) -> HTMLResponse:
    """Show the stored causal LMs, as ``GET /llms`` lists them."""
    return render(request, "llms.html", page="llms", llms=llms.list_llms(session, 1000, 0).items)


@pages.get("/llms/{name}", response_class=HTMLResponse, dependencies=EXPENSIVE)
def llm_page(
    request: Request, name: str, session: ReadSessionDep, device_kind: Name | None = None
) -> HTMLResponse:
    """Show an LLM's generation against its runs: TTFT, TPOT by context, tokens/s, kinds."""
    llm = llms.get_llm(name, session)
    points = llms.get_generation(name, session, device_kind=device_kind)
    series = {}
    for p in points[:3]:
        at = f"b{p.batch} p{p.prompt}"
        series[f"{at} composed"] = [(c.context, c.time_s.value or 0.0) for c in p.tpot_by_context]
        if p.measured is not None:
            steps = enumerate(p.measured.steps_s)
            series[f"{at} generate()"] = [(p.prompt + i, t) for i, t in steps]
    chart = lines_svg(series, "s", lambda c: f"{c:,.0f} tokens", "TPOT against the context")
    kinds = llms.get_llm_comparison(name, session) if llm.plans else []
    return render(
        request, "llm.html", page="llms", llm=llm, points=points, chart=chart, kinds=kinds
    )


@pages.get("/models/{name}/roofline.svg", dependencies=[*EXPENSIVE, FIGURE_TURN])
def roofline(name: str, session: ReadSessionDep, device_kind: Name) -> Response:
    """Draw the model on the kind's roofline, as the API does (SVG)."""
    return models.get_roofline(name, session, device_kind, fmt="svg")


JobStatus = Literal["queued", "running", "done", "failed", "cancelled"]
StatusQuery = Annotated[str | None, Query(max_length=20, description="A status; empty: any.")]


def _jobs_context(
    session: ReadSessionDep, status: str | None, device_kind: str | None
) -> dict[str, Any]:
    """Return the jobs page's figures; an empty filter (the form's "any") is no filter."""
    status = status or None
    if status is not None and status not in JOB_STATUSES:
        raise InvalidInputError(f"unknown job status {status!r}: one of {', '.join(JOB_STATUSES)}")
    page = jobs.list_jobs(
        session,
        limit=JOBS_PAGE,
        offset=0,
        status_=cast(JobStatus | None, status),
        device_kind=device_kind,
    )
    return {
        "jobs": page.items,
        "total": page.total,
        "totals": jobs.job_counts(session),
        "statuses": JOB_STATUSES,
        "status": status,
        "device_kind": device_kind,
        "kinds": [k.name for k in queries.device_kinds(session)],  # the route counts results
    }


def _jobs(
    request: Request, session: ReadSessionDep, status: str | None, kind: str | None, name: str
) -> HTMLResponse:
    return render(request, name, **_jobs_context(session, status, kind or None))


@pages.get("/jobs", response_class=HTMLResponse)
def jobs_page(
    request: Request,
    session: ReadSessionDep,
    status: StatusQuery = None,
    device_kind: Annotated[str | None, Query(max_length=200)] = None,
) -> HTMLResponse:
    """Show the queue, newest first: status, who holds each running job, a failed job's error."""
    return _jobs(request, session, status, device_kind, "jobs.html")


@pages.get("/jobs/rows", response_class=HTMLResponse)
def jobs_rows(
    request: Request,
    session: ReadSessionDep,
    status: StatusQuery = None,
    device_kind: Annotated[str | None, Query(max_length=200)] = None,
) -> HTMLResponse:
    """Return the jobs table alone: what the jobs page fetches to refresh itself."""
    return _jobs(request, session, status, device_kind, "jobs_table.html")


@pages.get("/jobs/{job_id}", response_class=HTMLResponse)
def job_page(request: Request, job_id: JobId, session: ReadSessionDep) -> HTMLResponse:
    """Show one job: what it measures, its state, its lease, its error and options."""
    return render(request, "job.html", job=jobs.get_job(job_id, session))


@pages.get("/configurations/{key}", response_class=HTMLResponse)
def config_page(request: Request, key: str, session: ReadSessionDep) -> HTMLResponse:
    """Show a configuration: what it is, its results over time, the newest one's provenance."""
    config = configs.get_configuration(key, session)
    page = configs.list_measurements(key, session, limit=MEASUREMENTS_PAGE, offset=0)
    series: dict[str, list[tuple[Any, float]]] = defaultdict(list)
    for m in page.items:
        origin = "" if m.source == fmt.MEASURED else f" · {fmt.source(m.source)}"
        series[f"{m.device_kind} · {m.timing} · {m.cache_mode}{origin}"].append(
            (m.created_at, m.time_median_s)
        )
    newest = page.items[0] if page.items else None
    provenance = queries.measurement_provenance(session, newest.id) if newest else {}
    return render(
        request,
        "config.html",
        **context.config_in_models(session, config.key),
        config=config,
        measurements=page.items,
        total=page.total,
        chart=time_series_svg(series, "s"),
        newest=newest,
        provenance=provenance,
    )


@router.get("/login", response_class=HTMLResponse)
def login_form(
    request: Request,
    settings: Annotated[Settings, Depends(get_settings_dep)],
    next: str = "/ui/",  # noqa: A002
    failed: bool = False,
    signed_out: bool = False,
) -> HTMLResponse:
    """Ask for a token where the server protects reads; else say that none is needed."""
    return render(
        request,
        "login.html",
        next=_safe_next(next),
        failed=failed,
        signed_out=signed_out,
        protected=settings.api_protect_reads,
        has_tokens=bool(server_tokens(settings)),
        session_hours=SESSION_S // 3600,
    )


@router.post("/login", dependencies=[Depends(same_origin), Depends(login_limited)])
def login(
    request: Request,
    settings: Annotated[Settings, Depends(get_settings_dep)],
    session: SessionDep,
    token: Annotated[str, Form(max_length=1000)],
    next: Annotated[str, Form(max_length=2000)] = "/ui/",  # noqa: A002
) -> RedirectResponse:
    """Sign in with a read or write token: a random cookie kept server-side stands for it."""
    target = _safe_next(next)
    if token_right(settings, token) is None:
        return RedirectResponse(f"/ui/login?failed=true&next={quote(target)}", status_code=303)
    response = RedirectResponse(target, status_code=303)
    sign_in(response, request, settings, session, token, time.time())
    return response


@router.post("/logout", dependencies=[Depends(same_origin)])
def logout(
    request: Request, settings: Annotated[Settings, Depends(get_settings_dep)], session: SessionDep
) -> RedirectResponse:
    """Sign out: end the sign-in (every copy of its cookie), then say so on the sign-in page."""
    response = RedirectResponse("/ui/login?signed_out=true", status_code=303)
    sign_out(response, request, settings, session)
    return response


def _safe_next(target: str) -> str:
    """Only a page of this app: no redirect elsewhere (``//host``, a scheme, a backslash)."""
    if target.startswith("/ui/") and not target.startswith("//") and "\\" not in target:
        return target
    return "/ui/"


router.include_router(pages)


def install(app: Any) -> None:
    """Mount the pages and their assets on ``app``.

    A page that needs a token redirects to the login (its errors: ``api.ui.errors``).
    """
    app.include_router(router)
    app.mount("/ui/static", StaticFiles(directory=HERE / "static"), name="ui-static")

    async def _login(request: Request, _exc: Exception) -> Response:
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        return RedirectResponse(f"/ui/login?next={quote(target)}", status_code=303)

    async def _slash() -> Response:
        return RedirectResponse("/ui/", status_code=308)

    app.add_exception_handler(LoginRequiredError, _login)
    app.add_api_route("/ui", _slash, include_in_schema=False)
