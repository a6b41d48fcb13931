"""Plots as PNG files without a plotting library, for the reports of bench, data and train: a canvas with a small
bitmap font, the speedup distribution per level (one dot per correct task at log2(speedup), a line at 1x), histograms
and line series."""

from __future__ import annotations

import math
import struct
import zlib

# 3x5 glyphs, rows top to bottom, bits left to right: digits, lowercase letters (capitals are drawn as them, but
# L) and the punctuation of module paths, operator names and numbers
_FONT = {
    "0": ("111", "101", "101", "101", "111"),
    "1": ("010", "110", "010", "010", "111"),
    "2": ("111", "001", "111", "100", "111"),
    "3": ("111", "001", "111", "001", "111"),
    "4": ("101", "101", "111", "001", "001"),
    "5": ("111", "100", "111", "001", "111"),
    "6": ("111", "100", "111", "101", "111"),
    "7": ("111", "001", "001", "001", "001"),
    "8": ("111", "101", "111", "101", "111"),
    "9": ("111", "101", "111", "001", "111"),
    ".": ("000", "000", "000", "000", "010"),
    "x": ("000", "101", "010", "101", "000"),
    "/": ("001", "001", "010", "100", "100"),
    "L": ("100", "100", "100", "100", "111"),
    "-": ("000", "000", "111", "000", "000"),
    "n": ("000", "110", "101", "101", "101"),
    "=": ("000", "111", "000", "111", "000"),
    " ": ("000", "000", "000", "000", "000"),
    "a": ("000", "011", "101", "101", "011"),
    "b": ("100", "110", "101", "101", "110"),
    "c": ("000", "011", "100", "100", "011"),
    "d": ("001", "011", "101", "101", "011"),
    "e": ("000", "010", "111", "100", "011"),
    "f": ("001", "010", "111", "010", "010"),
    "g": ("011", "101", "011", "001", "110"),
    "h": ("100", "110", "101", "101", "101"),
    "i": ("010", "000", "010", "010", "010"),
    "j": ("001", "000", "001", "101", "010"),
    "k": ("100", "101", "110", "110", "101"),
    "l": ("110", "010", "010", "010", "111"),
    "m": ("000", "111", "111", "101", "101"),
    "o": ("000", "010", "101", "101", "010"),
    "p": ("000", "110", "101", "110", "100"),
    "q": ("000", "011", "101", "011", "001"),
    "r": ("000", "011", "100", "100", "100"),
    "s": ("000", "011", "110", "011", "110"),
    "t": ("010", "111", "010", "010", "001"),
    "u": ("000", "101", "101", "101", "011"),
    "v": ("000", "101", "101", "111", "010"),
    "w": ("000", "101", "101", "111", "111"),
    "y": ("000", "101", "011", "001", "110"),
    "z": ("000", "111", "011", "110", "111"),
    "_": ("000", "000", "000", "000", "111"),
    ":": ("000", "010", "000", "010", "000"),
    ",": ("000", "000", "000", "010", "100"),
    "(": ("001", "010", "010", "010", "001"),
    ")": ("100", "010", "010", "010", "100"),
    "{": ("011", "010", "110", "010", "011"),
    "}": ("110", "010", "011", "010", "110"),
    "%": ("101", "001", "010", "100", "101"),
    "+": ("000", "010", "111", "010", "000"),
}
WHITE, GREY, BLACK, BLUE, RED = (255, 255, 255), (200, 200, 200), (40, 40, 40), (31, 119, 180), (214, 39, 40)


class Canvas:
    def __init__(self, width: int, height: int):
        self.w, self.h = width, height
        self.px = bytearray(WHITE * (width * height))

    def set(self, x: int, y: int, color) -> None:
        if 0 <= x < self.w and 0 <= y < self.h:
            i = 3 * (y * self.w + x)
            self.px[i : i + 3] = bytes(color)

    def rect(self, x0: int, y0: int, x1: int, y1: int, color) -> None:
        for y in range(max(0, y0), min(self.h, y1 + 1)):
            for x in range(max(0, x0), min(self.w, x1 + 1)):
                self.set(x, y, color)

    def text(self, x: int, y: int, s: str, color=BLACK, scale: int = 2) -> None:
        for ch in s:
            glyph = _FONT.get(ch) or _FONT.get(ch.lower(), _FONT[" "])
            for gy, row in enumerate(glyph):
                for gx, bit in enumerate(row):
                    if bit == "1":
                        self.rect(
                            x + gx * scale,
                            y + gy * scale,
                            x + gx * scale + scale - 1,
                            y + gy * scale + scale - 1,
                            color,
                        )
            x += 4 * scale

    def png(self) -> bytes:
        raw = b"".join(b"\x00" + bytes(self.px[3 * y * self.w : 3 * (y + 1) * self.w]) for y in range(self.h))

        def chunk(kind: bytes, data: bytes) -> bytes:
            return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

        header = struct.pack(">IIBBBBB", self.w, self.h, 8, 2, 0, 0, 0)
        return (
            b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b"")
        )


def speedup_plot(rows: dict[str, list[float]], path: str, lo: float = -3.0, hi: float = 3.0) -> None:
    """rows: level label -> speedups of its correct tasks. Dots left of the 1x line are slower than the baseline."""
    left, right, row_h, top = 90, 20, 60, 20
    width = 720
    height = top + row_h * max(1, len(rows)) + 40
    c = Canvas(width, height)
    span = width - left - right

    def xpos(s: float) -> int:
        v = min(hi, max(lo, math.log2(s))) if s > 0 else lo
        return left + round((v - lo) / (hi - lo) * span)

    for tick in range(int(lo), int(hi) + 1):
        x = xpos(2.0**tick)
        c.rect(x, top, x, height - 35, BLACK if tick == 0 else GREY)
        label = f"{2.0**tick:g}x" if tick >= 0 else f"1/{2**-tick}x"
        c.text(x - len(label) * 4, height - 28, label)
    for r, (label, speedups) in enumerate(rows.items()):
        y = top + r * row_h + row_h // 2
        c.text(8, y - 5, label[:10])
        c.text(8, y + 9, f"n={len(speedups)}", GREY)
        c.rect(left, y, width - right, y, GREY)
        for i, s in enumerate(sorted(speedups)):
            jitter = ((i * 7) % 9 - 4) * 3  # deterministic spread, so equal speedups stay visible
            x = xpos(s)
            c.rect(x - 2, y + jitter - 2, x + 2, y + jitter + 2, BLUE if s >= 1 else RED)
    with open(path, "wb") as f:
        f.write(c.png())


def bar_plot(bars: list[tuple[str, float, str, tuple]], path: str, mark: float | None = None) -> None:
    """Horizontal bars, one row each: (label at the left, value, the text at the bar's end, color); a thin line
    across every row at `mark` (1x, say) when given."""
    row_h, width = 26, 720
    left = min(300, max(60, 16 + 8 * max((len(label) for label, *_ in bars), default=0)))  # 8 px a character
    c = Canvas(width, 20 + row_h * max(1, len(bars)) + 10)
    most = max((value for _, value, _, _ in bars), default=1.0) or 1.0
    scale = (width - left - 110) / most
    for i, (label, value, text, color) in enumerate(bars):
        y = 20 + i * row_h
        c.text(8, y + 4, label)
        length = round(scale * value)
        c.rect(left, y, left + max(length, 1), y + row_h - 8, color)
        c.text(left + length + 8, y + 4, text)
        c.rect(left, y + row_h - 4, width - 20, y + row_h - 4, GREY)
    if mark is not None:
        x = left + round(scale * mark)
        c.rect(x, 10, x + 1, 20 + row_h * len(bars), GREY)
    with open(path, "wb") as f:
        f.write(c.png())


def histogram_plot(panels: list[dict[str, int]], path: str) -> None:
    """Bar charts one above the other (e.g. runtimes by decade, similarities by tenth): a bar per bucket, its count
    above it and its label below (digits, lowercase letters and a few marks: the font is small)."""
    width, panel_h, top = 720, 170, 20
    height = top + panel_h * max(1, len(panels))
    c = Canvas(width, height)
    for p, counts in enumerate(panels):
        y0 = top + p * panel_h
        base = y0 + panel_h - 40
        c.rect(20, base, width - 20, base, BLACK)
        if not counts:
            continue
        slot = (width - 40) // len(counts)
        most = max(counts.values()) or 1
        for i, (label, n) in enumerate(counts.items()):
            x = 20 + i * slot + slot // 4
            h = round((base - y0 - 20) * n / most)
            c.rect(x, base - h, x + slot // 2, base - 1, BLUE)
            c.text(x, base - h - 14, str(n))
            c.text(x, base + 8, label[:12])
    with open(path, "wb") as f:
        f.write(c.png())


def series_plot(series: dict[str, list[float]], path: str, lo: float, hi: float) -> None:
    """Lines over steps on one axis from `lo` to `hi` (e.g. mean reward and faster-than-compile rate per training
    step): one colour per series in order (blue, red, grey), a grey line at 0, the axis ends labelled."""
    width, height, left, top, bottom = 720, 300, 60, 20, 40
    c = Canvas(width, height)
    span_x, span_y = width - left - 20, height - top - bottom

    def ypos(v: float) -> int:
        return top + round((hi - min(hi, max(lo, v))) / (hi - lo) * span_y)

    c.rect(left, top, left, height - bottom, BLACK)
    c.rect(left, ypos(0.0), width - 20, ypos(0.0), GREY)
    for v in (lo, hi):
        c.text(8, ypos(v) - 5, f"{v:g}")
    n = max((len(v) for v in series.values()), default=0)
    c.text(left, height - 28, f"1-{n}" if n else "0")
    for color, values in zip((BLUE, RED, GREY), series.values()):
        points = [(left + round(i / max(1, n - 1) * span_x), ypos(v)) for i, v in enumerate(values)]
        for (x0, y0), (x1, y1) in zip(points, points[1:]):
            steps = max(abs(x1 - x0), abs(y1 - y0), 1)
            for k in range(steps + 1):
                c.rect(x0 + (x1 - x0) * k // steps, y0 + (y1 - y0) * k // steps, x0 + (x1 - x0) * k // steps + 1,
                       y0 + (y1 - y0) * k // steps + 1, color)  # fmt: skip
        for x, y in points:
            c.rect(x - 2, y - 2, x + 2, y + 2, color)
    with open(path, "wb") as f:
        f.write(c.png())
