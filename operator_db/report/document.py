"""The report as a document: cell formatters, displayed tables, Markdown and HTML output."""

from __future__ import annotations

import html
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

# --- formatting -------------------------------------------------------------------------------


def is_missing(x: Any) -> bool:
    """Say whether a cell is empty: None, pandas' NA or NaN."""
    return x is None or x is pd.NA or (isinstance(x, float) and math.isnan(x))


def num(scale: float = 1.0, digits: int = 4) -> Callable[[Any], str]:
    """Format with ``digits`` significant digits; large values in full with thousands commas."""

    def fmt(x: Any) -> str:
        if is_missing(x):
            return "—"
        v = float(x) * scale
        return f"{v:,.0f}" if 10**digits <= abs(v) < 1e15 else f"{v:.{digits}g}"

    return fmt


def fixed(digits: int, suffix: str = "") -> Callable[[Any], str]:
    """Format with ``digits`` decimals and a ``suffix``."""

    def fmt(x: Any) -> str:
        return "—" if is_missing(x) else f"{float(x):.{digits}f}{suffix}"

    return fmt


def percent(x: Any) -> str:
    """Format a share as a whole percentage."""
    return "—" if is_missing(x) else f"{float(x) * 100:.0f} %"


def signed_percent(x: Any) -> str:
    """Format a relative error as a signed percentage with one decimal."""
    return "—" if is_missing(x) else f"{float(x) * 100:+.1f} %"


def text(x: Any) -> str:
    """Format a cell as text."""
    return "—" if is_missing(x) else str(x)


def integer(x: Any) -> str:
    """Format a cell as an integer."""
    return "—" if is_missing(x) else str(int(x))


Columns = Sequence[tuple[str, str, Callable[[Any], str]]]
"""(source column, header, formatter) for a displayed table."""


def display(frame: pd.DataFrame, columns: Columns) -> pd.DataFrame:
    """Return ``frame`` as strings with human units in the headers (missing values as ``—``)."""
    return pd.DataFrame(
        {header: [fmt(v) for v in frame[name]] for name, header, fmt in columns if name in frame},
        dtype=object,
    )


def markdown_table(frame: pd.DataFrame) -> str:
    """Render a DataFrame of strings as a GitHub Markdown table (``|`` escaped)."""

    def cell(value: Any) -> str:
        return str(value).replace("|", "\\|").replace("\n", " ")

    header = "| " + " | ".join(cell(c) for c in frame.columns) + " |"
    rule = "| " + " | ".join("---" for _ in frame.columns) + " |"
    rows = ["| " + " | ".join(cell(v) for v in row) + " |" for row in frame.itertuples(False)]
    return "\n".join([header, rule, *rows])


def inline_html(text: str) -> str:
    """Escape ``text`` for HTML, turning Markdown code spans (backticks) into ``<code>``."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(text))


# --- the document -----------------------------------------------------------------------------


@dataclass
class Document:
    """A report as a list of blocks, rendered to Markdown or HTML."""

    title: str
    blocks: list[tuple[str, Any]] = field(default_factory=list)

    def heading(self, text: str) -> None:
        """Add a section heading."""
        self.blocks.append(("h2", text))

    def para(self, text: str) -> None:
        """Add a paragraph (Markdown code spans allowed)."""
        self.blocks.append(("p", text))

    def bullets(self, items: Sequence[str]) -> None:
        """Add a bulleted list (nothing when ``items`` is empty)."""
        if items:
            self.blocks.append(("ul", list(items)))

    def table(self, frame: pd.DataFrame) -> None:
        """Add a table of already formatted cells."""
        self.blocks.append(("table", frame))

    def image(self, name: str, alt: str) -> None:
        """Add an image: a PNG beside the report, with its alt text."""
        self.blocks.append(("img", (name, alt)))

    def markdown(self) -> str:
        """Return the document as Markdown."""
        out = [f"# {self.title}"]
        for block, value in self.blocks:
            if block == "h2":
                out.append(f"## {value}")
            elif block == "p":
                out.append(value)
            elif block == "ul":
                out.append("\n".join(f"- {item}" for item in value))
            elif block == "table":
                out.append(markdown_table(value))
            else:
                out.append(f"![{value[1]}]({value[0]})")
        return "\n\n".join(out) + "\n"

    def html(self) -> str:
        """Return the document as a standalone HTML page."""
        out = [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            f"<title>{html.escape(self.title)}</title>",
            "<style>body{font-family:system-ui,sans-serif;max-width:1200px;margin:2em auto;"
            "padding:0 1em;color:#222}table{border-collapse:collapse;font-size:.85em;"
            "margin:1em 0}th,td{border:1px solid #ccc;padding:.25em .5em;text-align:right}"
            "th{background:#f4f4f4}td:first-child,th:first-child{text-align:left}"
            "img{max-width:100%;border:1px solid #eee;margin:.5em 0}</style>",
            "</head><body>",
            f"<h1>{html.escape(self.title)}</h1>",
        ]
        for block, value in self.blocks:
            if block == "h2":
                out.append(f"<h2>{html.escape(value)}</h2>")
            elif block == "p":
                out.append(f"<p>{inline_html(value)}</p>")
            elif block == "ul":
                out.append("<ul>" + "".join(f"<li>{inline_html(i)}</li>" for i in value) + "</ul>")
            elif block == "table":
                out.append(value.to_html(index=False, escape=True, border=0))
            else:
                name, alt = (html.escape(v) for v in value)
                out.append(
                    f'<figure><img src="{name}" alt="{alt}"><figcaption>{alt}</figcaption></figure>'
                )
        out.append("</body></html>")
        return "\n".join(out) + "\n"
