"""The report page: one self-contained HTML document (inline CSS, images as data URIs,
no scripts, nothing fetched from anywhere)."""

from __future__ import annotations

import base64
import struct
from dataclasses import dataclass
from html import escape

from attnprof.profiler.units import printable

CSS = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: #1d2330;
       margin: 0 auto; max-width: 1500px; padding: 0 24px 48px; }
header { border-bottom: 2px solid #d8dde6; margin-bottom: 12px; }
h1 { font-size: 22px; margin: 18px 0 4px; } h2 { font-size: 18px; margin: 28px 0 8px; }
h3 { font-size: 15px; margin: 18px 0 6px; }
nav a { margin-right: 14px; color: #2457a6; text-decoration: none; } nav { margin: 8px 0 4px; }
.meta { color: #5b6475; margin: 4px 0 10px; }
figure { margin: 12px 0 22px; } figcaption { color: #5b6475; max-width: 1100px; }
img { max-width: 100%; height: auto; border: 1px solid #eef0f4; }
.scroll { overflow-x: auto; }
table { border-collapse: collapse; margin: 6px 0 12px; font-variant-numeric: tabular-nums; }
th, td { border: 1px solid #d8dde6; padding: 3px 8px; text-align: right; vertical-align: top; }
thead th { background: #f2f4f8; position: sticky; top: 0; }
tbody th { text-align: left; font-weight: 600; white-space: nowrap; }
.text { text-align: left; }
td.reason { text-align: left; max-width: 520px; overflow-wrap: anywhere; }
table.manifest td { overflow-wrap: anywhere; max-width: 900px; }
.pred { font-style: italic; color: #5b6475; }
.off { background: #fff4d6; }
td.status-ok { color: #1e7b34; }
td.status-oom, td.status-crashed, td.status-error { background: #fde8e8; color: #9b1c1c; }
td.status-timeout, td.status-skipped { background: #fff4d6; color: #7a5300; }
tr.regression > * { background: #fde8e8; } tr.regression td.verdict { color: #9b1c1c; font-weight: 700; }
tr.improvement > * { background: #e6f6ea; } tr.improvement td.verdict { color: #1e7b34; font-weight: 700; }
tr.changed > *, tr.new > *, tr.gone > *, tr.slower > *, tr.faster > * { background: #f2f4f8; }
.note { color: #5b6475; font-size: 13px; max-width: 1100px; }
"""


def esc(text) -> str:
    """Plain text into HTML: control characters spelled out (``printable``: an ESC or a
    newline in a variant label or GPU name shows as \\x1b, \\n), then markup escaped."""
    return escape(printable(text))


# Defence in depth: even a string that escaped escaping could load or run nothing.
CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"


@dataclass
class Section:
    anchor: str  # id in the page, [a-z-] only
    title: str  # plain text
    body: str  # HTML, already escaped by whoever built it


def image(data: bytes, alt: str, caption: str) -> str:
    """A PNG (its bytes, as drawn: never read back from a folder that is data) embedded as
    a data URI, with its pixel size so the page does not reflow."""
    width, height = struct.unpack(">II", data[16:24])  # the IHDR chunk of a PNG
    uri = "data:image/png;base64," + base64.b64encode(data).decode("ascii")
    return (f'<figure><img src="{uri}" alt="{esc(alt)}" width="{width}" height="{height}">'
            f"<figcaption>{esc(caption)}</figcaption></figure>")


def paragraph(text: str, cls: str = "") -> str:
    return f'<p{f" class={chr(34)}{esc(cls)}{chr(34)}" if cls else ""}>{esc(text)}</p>'


def document(title: str, meta: list[str], sections: list[Section]) -> str:
    nav = " ".join(f'<a href="#{s.anchor}">{esc(s.title)}</a>' for s in sections)
    body = "\n".join(f'<section id="{s.anchor}"><h2>{esc(s.title)}</h2>\n{s.body}</section>' for s in sections)
    lines = "".join(f'<p class="meta">{esc(m)}</p>' for m in meta)
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="Content-Security-Policy" content="{CSP}">
<title>{esc(title)}</title>
<style>{CSS}</style>
</head>
<body>
<header><h1>{esc(title)}</h1>{lines}<nav>{nav}</nav></header>
{body}
</body>
</html>
"""
