"""Reading report.html back as a person sees it: its headings, its text, its images decoded."""
from __future__ import annotations

import base64
import io
from html.parser import HTMLParser
from pathlib import Path

from PIL import Image


class _Page(HTMLParser):
    def __init__(self):
        super().__init__()
        self.images: list[str] = []
        self.alts: list[str] = []
        self.text: list[str] = []
        self.headings: list[str] = []
        self._in_heading = False

    def handle_starttag(self, tag, attrs):
        if tag == "img":
            self.images.append(dict(attrs).get("src", ""))
            self.alts.append(dict(attrs).get("alt", ""))
        self._in_heading = tag in ("h1", "h2", "h3")

    def handle_endtag(self, tag):
        self._in_heading = False

    def handle_data(self, data):
        self.text.append(data)
        if self._in_heading:
            self.headings.append(data.strip())


def parse_report(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text(encoding="utf-8"))
    page.close()
    return page


def decoded_pngs(page: _Page) -> list[Image.Image]:
    """Every <img> must be an embedded PNG that really decodes (self-contained report)."""
    images = []
    for src in page.images:
        assert src.startswith("data:image/png;base64,"), src[:60]
        image = Image.open(io.BytesIO(base64.b64decode(src.split(",", 1)[1])))
        image.load()
        images.append(image)
    return images
