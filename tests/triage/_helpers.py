"""Helpers the tests of triage share."""

from __future__ import annotations

from html.parser import HTMLParser


def gv_json(obj):
    """``obj`` as gradverify writes it to JSON."""
    from gradverify import _io

    return _io.to_json(obj)


class TableCells(HTMLParser):
    """The text of each table row's cells."""

    def __init__(self):
        super().__init__()
        self.rows, self.cell = [], None

    def handle_starttag(self, tag, attrs):
        if tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            self.cell = ""

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self.cell is not None:
            self.rows[-1].append(self.cell)
            self.cell = None

    def handle_data(self, data):
        if self.cell is not None:
            self.cell += data
