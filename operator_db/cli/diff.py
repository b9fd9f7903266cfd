"""``opdb diff``: whether a model (or one configuration) got faster or slower, beyond noise."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.table import Table

from operator_db.cli.common import DatabaseOption, console, open_store


def diff(
    model: Annotated[str, typer.Argument(help="Model name.")],
    device_kind: Annotated[
        str | None,
        typer.Option("--device-kind", help="Device kind (default: the only one measured)."),
    ] = None,
    config: Annotated[
        str | None,
        typer.Option(
            "--config", help="A configuration's key: compare its results, not the model's."
        ),
    ] = None,
    a: Annotated[
        str,
        typer.Option(
            "--a",
            help="The first result: newest, previous, an id, host:NAME, driver:VERSION, "
            "torch:VERSION or before:YYYY-MM-DD.",
        ),
    ] = "previous",
    b: Annotated[str, typer.Option("--b", help="The second result (same selectors).")] = "newest",
    threshold: Annotated[
        float, typer.Option(help="A change below this share is no change (criterion: 0.01).")
    ] = 0.01,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    db: DatabaseOption = None,
) -> None:
    """Compare two results of MODEL (or --config) on a kind: the change, its interval, a verdict.

    ``b`` relative to ``a``, each a median with its 95 % interval; the change is beyond noise
    where its interval excludes 0 and it is at least ``--threshold``.
    """
    from operator_db.cli.estimate import pick_kind
    from operator_db.estimate.change import ChangeQuery, compare_results
    from operator_db.stats import format_percent

    with open_store(db) as store, store.transaction(read_only=True) as session:
        kind = pick_kind(session, model, device_kind)
        change = compare_results(
            session, ChangeQuery(model, kind, config, a, b, threshold=threshold)
        )
    if as_json:
        print(json.dumps(change.as_dict(), indent=2))
        return
    table = Table("", "result", "when", "host", "driver", "torch", "time (ms)", title=change.target)
    for label, r, t in (("a", change.a, change.a_time), ("b", change.b, change.b_time)):
        width = f" ({t.low * 1e3:.3f} … {t.high * 1e3:.3f})" if t.high > t.low else " (no interval)"
        table.add_row(
            label,
            str(r.id),
            r.created_at.strftime("%Y-%m-%d %H:%M"),
            r.host or "-",
            r.driver_version or "-",
            r.torch_version or "-",
            f"{t.value * 1e3:.3f}{width}",
        )
    console.print(table)
    verdict = {
        "slower": "slower, beyond noise",
        "faster": "faster, beyond noise",
        "within noise": "no change: within noise",
        "below threshold": f"no change: beyond noise but under the {threshold:.0%} threshold",
        "unknown": "unknown: a result without samples has no noise to compare against",
    }[change.verdict]
    console.print(f"b against a: {format_percent(change.change)}: {verdict}")
