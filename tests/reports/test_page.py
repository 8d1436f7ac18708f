"""The report page (reports/page.py): one self-contained HTML document, every piece of
text escaped with its control characters spelled out, images inline with their size,
and a policy that lets the page load and run nothing."""

from __future__ import annotations

import base64
import struct
import zlib

from attnprof.reports.page import CSP, Section, document, esc, image, paragraph


def png(width: int, height: int) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"\0" * (width + 1)))


def test_text_is_escaped_and_control_characters_are_spelled_out():
    assert esc('<b a="1">&') == "&lt;b a=&quot;1&quot;&gt;&amp;"
    assert esc("lsh\x1b[31m\nx") == "lsh\\x1b[31m\\nx"
    assert paragraph("<i>", cls="note") == '<p class="note">&lt;i&gt;</p>'
    assert paragraph("plain") == "<p>plain</p>"


def test_an_image_is_inline_with_its_pixel_size():
    data = png(640, 480)
    html = image(data, alt="peak <memory>", caption="n & memory")
    assert 'width="640" height="480"' in html and 'alt="peak &lt;memory&gt;"' in html
    assert "data:image/png;base64," + base64.b64encode(data).decode() in html
    assert "<figcaption>n &amp; memory</figcaption>" in html


def test_the_document_has_its_sections_a_nav_and_a_policy_that_loads_nothing():
    page = document("run <x>", ["made today"], [Section("memory", "Peak memory", "<table></table>"),
                                               Section("time", "Step time", "<p>t</p>")])
    assert page.startswith("<!DOCTYPE html>") and "<title>run &lt;x&gt;</title>" in page
    assert '<a href="#memory">Peak memory</a> <a href="#time">Step time</a>' in page
    assert '<section id="memory"><h2>Peak memory</h2>\n<table></table></section>' in page
    assert f'content="{CSP}"' in page and "default-src 'none'" in CSP
    assert "<script" not in page and "http://" not in page and "https://" not in page
    assert '<p class="meta">made today</p>' in page
