"""The Markdown of ``bench/bench_gpu.py``: the JSON report (times in s) rendered for people."""

from __future__ import annotations

from typing import Any

from gpu_common import ms, pct, us

DRY_BANNER = (
    "**Dry run** on the {device} device: times are real measurements of tiny sizes on this "
    "machine's CPU; {energy}. GPU-only checks say `skipped: no CUDA`. None of these figures says "
    "anything about a GPU."
)


def _energy_note(report: dict[str, Any]) -> str:
    if report["device_type"] == "fake":
        return (
            "energy comes from the fake device's set power (its counter is the exact integral), "
            "not a sensor: the energy checks exercise the code path only"
        )
    return "energy is whatever this CPU's RAPL gives (usually unreadable: then skipped)"


def _section_rows(report: dict[str, Any]) -> list[str]:
    sections = report["sections"]
    rows = ["| section | wall (s) | result |", "| --- | ---: | --- |"]
    py = sections["pytest"]
    rows.append(f"| 1. `pytest -m gpu` | {py['wall_s']:.1f} | {py['status']}: {py['result']} |")
    checks = sections["checks"]
    counts: dict[str, int] = {}
    for check in checks["checks"]:
        counts[check["status"]] = counts.get(check["status"], 0) + 1
    text = ", ".join(f"{n} {s}" for s, n in counts.items())
    rows.append(f"| 2. checks | {checks['wall_s']:.1f} | {text} |")
    est = sections["estimate"]
    done = sum(1 for c in est.get("cases", []) if c.get("status") == "done")
    total = len(est.get("cases", []))
    median = est.get("median_abs_error")
    result = (
        f"{done} of {total} cases; median absolute error "
        f"{'-' if median is None else f'{median:.1%}'} ({est['status']})"
    )
    if est.get("reason"):
        result = f"{est['status']}: {est['reason']}"
    rows.append(f"| 3. interleaved estimate | {est['wall_s']:.1f} | {result} |")
    return rows


def _pytest(py: dict[str, Any]) -> list[str]:
    lines = [
        "## 1. `pytest -m gpu`",
        "",
        f"`{py['command']}` with `OPDB_REQUIRE_GPU={py['require_gpu']}`: **{py['result']}** "
        f"(exit code {py['returncode']}).",
    ]
    if py.get("reason"):
        lines.append(f"\n{py['reason']}")
    lines += ["", "Tail of its output:", "", "```text", *py["tail"], "```"]
    return lines


def _window_rows(windows: list[dict[str, Any]], label: str) -> list[str]:
    rows = []
    for w in windows:
        power, integrated, counter = w["mean_power_w"], w["integrated_mj"], w["counter_mj"]
        rows.append(
            f"| {label} | {w['nominal_s']:g} | {w['duration_s']:.3f} | {w['calls'] or '-'} | "
            f"{'-' if counter is None else counter} | "
            f"{'-' if integrated is None else f'{integrated:.0f}'} | "
            f"{pct(w['disagreement'])} | {'-' if power is None else f'{power:.1f}'} | "
            f"{w['power_samples']} |"
        )
    return rows


def _checks(checks: list[dict[str, Any]]) -> list[str]:
    lines = [
        "## 2. Checks",
        "",
        "| check | target | result | figures |",
        "| --- | --- | --- | --- |",
    ]
    for c in checks:
        figures = c["summary"] or c["reason"] or ""
        if c["figures"].get("verdict"):
            figures += f" (dry run: would {c['figures']['verdict']})"
        status = f"**{c['status']}**" if c["status"] in ("fail", "error") else c["status"]
        lines.append(f"| {c['title']} | {c['target']} | {status} | {figures} |")
    for c in checks:
        if c["name"] == "counter_vs_power" and c["figures"].get("idle") is not None:
            f = c["figures"]
            lines += [
                "",
                f"Energy windows (counter update period {ms(f['counter_update_period_s'], 1)} ms, "
                f"power reading's {ms(f['power_update_period_s'], 1)} ms):",
                "",
                "| load | nominal (s) | length (s) | calls | counter (mJ) | integrated (mJ) "
                "| disagreement | mean power (W) | samples |",
                "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
                *_window_rows(f["idle"], "idle"),
                *_window_rows(f["matmul"], "matmul"),
            ]
        if c["name"] == "eager_vs_window" and c["figures"]:
            f = c["figures"]
            trials = ", ".join(us(t) for t in f["trial_time_per_call_s"])
            energy = f["energy_per_call_j"]
            lines += [
                "",
                f"Eager vs window: eager median {us(f['eager_median_s'])} µs (IQR/median "
                f"{f['eager_iqr_ratio']:.3f}), per-call time in each window {trials} µs, "
                f"energy {'-' if energy is None else f'{energy * 1e3:.3f}'} mJ/call "
                f"(settings: {f['settings']}).",
            ]
        if c["reason"] and c["status"] in ("fail", "error"):
            lines += ["", f"{c['title']}: {c['reason']}"]
    return lines


def _estimate(est: dict[str, Any]) -> list[str]:
    lines = ["## 3. Interleaved estimate", ""]
    if est.get("reason"):
        return [*lines, est["reason"]]
    median = est["median_abs_error"]
    lines += [
        f"Device kind `{est['device_kind']}`; one interleaved job per case (the model, its hollow "
        "run and every configuration in alternating rounds), as `opdb measure` does; fresh SQLite "
        f"database `{est['database']}`. Settings shorter than the defaults: "
        f"`{est['settings_overrides']}` (energy is validated in section 2; here time only).",
        "",
        "*Operators* is the device stage (Σ count × per-call time); *host* the host stage (the "
        "hollow run's issue time + the modules' issue times; GPU only); the *estimate* is "
        "`total_time_s`: on a GPU the two stages simulated over the calls in order (the "
        "pipeline), with each call's host and device times from the replay of the model's calls "
        "where it ran; on the CPU or the fake device operators + time between them. *Before* is "
        "the method before the replay: operators looped alone (on a GPU the longer stage). "
        "*Graph* is `--timing graph` against the model captured whole as one CUDA graph.",
        "",
        "| case | configs | operators (ms) | host (ms) | estimate (ms) | bound by | measured (ms) "
        "| error | error before | graph est. (ms) | graph run (ms) | graph error | coverage "
        "| wall (s) |",
        "| --- | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: "
        "| ---: | ---: |",
    ]
    notes = []
    for c in est["cases"]:
        if c["status"] not in ("done", "failed"):
            lines.append(f"| {c['name']} | {c['status']}: {c.get('reason', '')} |" + " |" * 12)
            continue
        cov = c.get("coverage")
        lines.append(
            f"| {c['name']} | {c.get('configurations', '-')} | {ms(c.get('operators_s'))} | "
            f"{ms(c.get('host_s'))} | {ms(c.get('estimate_s'))} | {c.get('bound_by') or '-'} | "
            f"{ms(c.get('measured_s'))} | {pct(c.get('error'))} | {pct(c.get('max_error'))} | "
            f"{ms(c.get('graph_estimate_s'))} | {ms(c.get('graph_measured_s'))} | "
            f"{pct(c.get('graph_error'))} | "
            f"{'-' if cov is None else f'{cov:.0%}'} | {c.get('wall_s', 0):.1f} |"
        )
        if c.get("reason"):
            notes.append(f"- {c['name']}: {c['reason']}")
    lines += [
        "",
        f"Median absolute error **{'-' if median is None else f'{median:.1%}'}** over "
        f"{est['cases_with_error']} cases (target ≤ {est['target']:.0%}, aiming at "
        f"{est['aim']:.0%}): {est['status']}"
        f"{' (dry run: would ' + est['verdict'] + ')' if est['status'] == 'info' else ''}.",
    ]
    hosts = sorted({c["host_cpu"] for c in est["cases"] if c.get("host_cpu")})
    if hosts:
        lines += ["", f"Host stages measured on: {'; '.join(hosts)}."]
    return lines + (["", *notes] if notes else [])


def render(report: dict[str, Any]) -> str:
    """Return the report as Markdown."""
    env = report["environment"]
    lines = ["# GPU validation of operator-db", ""]
    if report["dry_run"]:
        banner = DRY_BANNER.format(device=report["device_type"], energy=_energy_note(report))
        lines += [banner, ""]
    lines += [
        f"Device: **{env['device_name']}** ({report['device_spec']}); torch {env['torch']} "
        f"(CUDA {env['cuda']}, CPU threads: {env['torch_threads']}), transformers "
        f"{env['transformers']}, Python {env['python']}; "
        f"host {env['host']}; commit {report['commit']}; {report['started_utc']}.",
        "",
        f"Budget {report['budget_s']:.0f} s, wall time {report['wall_s']:.1f} s. "
        f"Command: `{report['command']}`",
        "",
        *_section_rows(report),
        "",
        *_pytest(report["sections"]["pytest"]),
        "",
        *_checks(report["sections"]["checks"]["checks"]),
        "",
        *_estimate(report["sections"]["estimate"]),
        "",
    ]
    return "\n".join(lines)
