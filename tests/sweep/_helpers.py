"""Helpers the tests of the sweeps and their reports share."""

from __future__ import annotations

import filecmp
import json

from gradverify import cli
from gradverify._sweep import reports


def png_pixels(data: bytes) -> list[tuple[int, ...]]:
    """The pixels of an 8-bit, non-interlaced RGB or RGBA PNG (what a
    browser's screenshot is), decoded with zlib alone."""
    import struct
    import zlib

    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, header = 8, b"", None
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    width, height, depth, color, _, _, interlace = header
    assert depth == 8 and color in (2, 6) and interlace == 0, header
    channels = 3 if color == 2 else 4
    raw, stride = zlib.decompress(idat), width * channels
    rows: list[bytearray] = []
    previous = bytearray(stride)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for i in range(stride):
            left = line[i - channels] if i >= channels else 0
            up, corner = previous[i], previous[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + left) & 255
            elif kind == 2:
                line[i] = (line[i] + up) & 255
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 255
            elif kind == 4:
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                line[i] = (line[i] + (left if pa <= pb and pa <= pc else up if pb <= pc else corner)) & 255
        rows.append(line)
        previous = line
    return [tuple(row[x * channels : x * channels + 3]) for row in rows for x in range(width)]


#: The sweep of test_scale*: two targets that pass and one that fails, on two backends.
TARGETS = ["bias_act:relu", "bias_act:tanh", "example:seed-bug"]


OPTIONS = ["--backend", "numpy", "torch", "--impl", "fused", "--max-examples", "3"]


def run(capsys, *argv):
    """``cli.main(argv)`` in this process: its exit code and stdout."""
    code = cli.main(list(argv))
    out = capsys.readouterr().out
    return code, out


def canonical(directory):
    """The report.json in ``directory``, without what differs from run to run."""
    return reports.canonical(json.loads((directory / "report.json").read_text()))


def same_files(a, b):
    """The failures' .npz and .py files, byte for byte."""
    names = sorted(p.name for p in (a / "cases").iterdir())
    assert names == sorted(p.name for p in (b / "cases").iterdir()) and any(n.endswith(".npz") for n in names)
    match, mismatch, errors = filecmp.cmpfiles(a / "cases", b / "cases", names, shallow=False)
    assert not mismatch and not errors
