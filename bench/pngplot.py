"""pngplot.py — line charts as PNG files with the Python standard library only.

The machines that run the soak and the benchmarks have neither matplotlib nor
gnuplot, and the project adds no packages for a chart: this draws time series
on an RGB canvas (lines, axes, ticks, a 5x7 bitmap font) and writes the PNG
with zlib. Enough for a chart to read, nothing more.

    from pngplot import Panel, Series, write_chart
    write_chart("out.png", "title", [Panel("RSS (MiB)", [Series("rss", xs, ys)])])
"""
import math
import struct
import zlib

# Classic 5x7 glyphs, one byte per column, least significant bit at the top.
# Text is drawn upper-case; characters without a glyph are drawn as spaces.
_FONT = {
    " ": (0x00, 0x00, 0x00, 0x00, 0x00), "0": (0x3E, 0x51, 0x49, 0x45, 0x3E),
    "1": (0x00, 0x42, 0x7F, 0x40, 0x00), "2": (0x42, 0x61, 0x51, 0x49, 0x46),
    "3": (0x21, 0x41, 0x45, 0x4B, 0x31), "4": (0x18, 0x14, 0x12, 0x7F, 0x10),
    "5": (0x27, 0x45, 0x45, 0x45, 0x39), "6": (0x3C, 0x4A, 0x49, 0x49, 0x30),
    "7": (0x01, 0x71, 0x09, 0x05, 0x03), "8": (0x36, 0x49, 0x49, 0x49, 0x36),
    "9": (0x06, 0x49, 0x49, 0x29, 0x1E), "A": (0x7E, 0x11, 0x11, 0x11, 0x7E),
    "B": (0x7F, 0x49, 0x49, 0x49, 0x36), "C": (0x3E, 0x41, 0x41, 0x41, 0x22),
    "D": (0x7F, 0x41, 0x41, 0x22, 0x1C), "E": (0x7F, 0x49, 0x49, 0x49, 0x41),
    "F": (0x7F, 0x09, 0x09, 0x09, 0x01), "G": (0x3E, 0x41, 0x49, 0x49, 0x7A),
    "H": (0x7F, 0x08, 0x08, 0x08, 0x7F), "I": (0x00, 0x41, 0x7F, 0x41, 0x00),
    "J": (0x20, 0x40, 0x41, 0x3F, 0x01), "K": (0x7F, 0x08, 0x14, 0x22, 0x41),
    "L": (0x7F, 0x40, 0x40, 0x40, 0x40), "M": (0x7F, 0x02, 0x0C, 0x02, 0x7F),
    "N": (0x7F, 0x04, 0x08, 0x10, 0x7F), "O": (0x3E, 0x41, 0x41, 0x41, 0x3E),
    "P": (0x7F, 0x09, 0x09, 0x09, 0x06), "Q": (0x3E, 0x41, 0x51, 0x21, 0x5E),
    "R": (0x7F, 0x09, 0x19, 0x29, 0x46), "S": (0x46, 0x49, 0x49, 0x49, 0x31),
    "T": (0x01, 0x01, 0x7F, 0x01, 0x01), "U": (0x3F, 0x40, 0x40, 0x40, 0x3F),
    "V": (0x1F, 0x20, 0x40, 0x20, 0x1F), "W": (0x3F, 0x40, 0x38, 0x40, 0x3F),
    "X": (0x63, 0x14, 0x08, 0x14, 0x63), "Y": (0x07, 0x08, 0x70, 0x08, 0x07),
    "Z": (0x61, 0x51, 0x49, 0x45, 0x43), ".": (0x00, 0x60, 0x60, 0x00, 0x00),
    ",": (0x00, 0x50, 0x30, 0x00, 0x00), ":": (0x00, 0x36, 0x36, 0x00, 0x00),
    "-": (0x08, 0x08, 0x08, 0x08, 0x08), "(": (0x00, 0x1C, 0x22, 0x41, 0x00),
    ")": (0x00, 0x41, 0x22, 0x1C, 0x00), "%": (0x23, 0x13, 0x08, 0x64, 0x62),
    "/": (0x20, 0x10, 0x08, 0x04, 0x02), "=": (0x14, 0x14, 0x14, 0x14, 0x14),
    "+": (0x08, 0x08, 0x3E, 0x08, 0x08), "_": (0x40, 0x40, 0x40, 0x40, 0x40),
    "<": (0x08, 0x14, 0x22, 0x41, 0x00), ">": (0x00, 0x41, 0x22, 0x14, 0x08),
}

WHITE, BLACK, GREY = (255, 255, 255), (0, 0, 0), (200, 200, 200)
COLOURS = [(31, 119, 180), (214, 39, 40), (44, 160, 44), (255, 127, 14)]


class Canvas:
    def __init__(self, width, height):
        self.w, self.h = width, height
        self.px = bytearray(WHITE * (width * height))

    def dot(self, x, y, c):
        if 0 <= x < self.w and 0 <= y < self.h:
            i = 3 * (y * self.w + x)
            self.px[i:i + 3] = bytes(c)

    def line(self, x0, y0, x1, y1, c, dash=0):
        """Bresenham; dash > 0 draws dash pixels on, dash off."""
        x0, y0, x1, y1 = int(round(x0)), int(round(y0)), int(round(x1)), int(round(y1))
        dx, dy = abs(x1 - x0), -abs(y1 - y0)
        sx, sy = (1 if x0 < x1 else -1), (1 if y0 < y1 else -1)
        err, n = dx + dy, 0
        while True:
            if not dash or (n // dash) % 2 == 0:
                self.dot(x0, y0, c)
            n += 1
            if x0 == x1 and y0 == y1:
                return
            e2 = 2 * err
            if e2 >= dy:
                err += dy
                x0 += sx
            if e2 <= dx:
                err += dx
                y0 += sy

    def text(self, x, y, s, c=BLACK, scale=1):
        """Draws s with its top-left corner at (x, y); returns its width."""
        for k, ch in enumerate(s.upper()):
            cols = _FONT.get(ch, _FONT[" "])
            for cx, bits in enumerate(cols):
                for cy in range(7):
                    if bits >> cy & 1:
                        for ax in range(scale):
                            for ay in range(scale):
                                self.dot(x + (6 * k + cx) * scale + ax, y + cy * scale + ay, c)
        return 6 * len(s) * scale

    def png(self):
        raw = b"".join(b"\x00" + bytes(self.px[3 * y * self.w:3 * (y + 1) * self.w])
                       for y in range(self.h))

        def chunk(kind, data):
            return (struct.pack(">I", len(data)) + kind + data +
                    struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))
        return (b"\x89PNG\r\n\x1a\n" +
                chunk(b"IHDR", struct.pack(">IIBBBBB", self.w, self.h, 8, 2, 0, 0, 0)) +
                chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


class Series:
    def __init__(self, label, xs, ys, dash=0):
        self.label, self.xs, self.ys, self.dash = label, list(xs), list(ys), dash


class Panel:
    """One plot: a y-axis label, series, and optional vertical marks (x, label)."""

    def __init__(self, ylabel, series, vmarks=(), ymin=None, ymax=None):
        self.ylabel, self.series, self.vmarks = ylabel, series, list(vmarks)
        self.ymin, self.ymax = ymin, ymax


def nice_ticks(lo, hi, n=5):
    """About n round tick values covering [lo, hi]."""
    if hi <= lo:
        hi = lo + 1
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = (lo // step) * step
    ticks, v = [], first
    while v <= hi + step * 1e-9:
        if v >= lo - step * 1e-9:
            ticks.append(v)
        v += step
    return ticks, step


def _fmt(v, step):
    return f"{v:.0f}" if step >= 1 else f"{v:.{-math.floor(math.log10(step))}f}"


def draw_panel(cv, box, panel, xlo, xhi, xlabel):
    left, top, right, bottom = box
    ys = [y for s in panel.series for y in s.ys]
    ylo = panel.ymin if panel.ymin is not None else min(ys)
    yhi = panel.ymax if panel.ymax is not None else max(ys)
    pad = (yhi - ylo) * 0.08 or 1
    ylo, yhi = ylo - pad, yhi + pad
    yt, ystep = nice_ticks(ylo, yhi)
    xt, xstep = nice_ticks(xlo, xhi, 8)

    def X(x):
        return left + (x - xlo) / (xhi - xlo) * (right - left)

    def Y(y):
        return bottom - (y - ylo) / (yhi - ylo) * (bottom - top)

    for v in yt:
        cv.line(left, Y(v), right, Y(v), GREY, dash=2)
        s = _fmt(v, ystep)
        cv.text(left - 8 - 12 * len(s), int(Y(v)) - 7, s, scale=2)
    for v in xt:
        cv.line(X(v), bottom, X(v), bottom + 5, BLACK)
        s = _fmt(v, xstep)
        cv.text(int(X(v)) - 6 * len(s), bottom + 10, s, scale=2)
    cv.line(left, top, left, bottom, BLACK)
    cv.line(left, bottom, right, bottom, BLACK)
    cv.line(right, top, right, bottom, BLACK)
    cv.line(left, top, right, top, BLACK)
    for x, label in panel.vmarks:
        cv.line(X(x), top, X(x), bottom, BLACK, dash=4)
        cv.text(int(X(x)) + 4, top + 4, label, scale=2)
    for i, s in enumerate(panel.series):
        c = COLOURS[i % len(COLOURS)]
        pts = [(X(x), Y(y)) for x, y in zip(s.xs, s.ys)]
        for (x0, y0), (x1, y1) in zip(pts, pts[1:]):
            cv.line(x0, y0, x1, y1, c, dash=s.dash)
        if len(pts) == 1:
            cv.dot(int(pts[0][0]), int(pts[0][1]), c)
    # Legend, bottom right, one line per series, drawn after the data so it stays legible.
    lx = right - 12 * max(len(s.label) for s in panel.series) - 40
    for i, s in enumerate(panel.series):
        ly = bottom - 12 - 20 * (len(panel.series) - i)
        cv.line(lx, ly + 7, lx + 24, ly + 7, COLOURS[i % len(COLOURS)], dash=s.dash)
        cv.line(lx, ly + 8, lx + 24, ly + 8, COLOURS[i % len(COLOURS)], dash=s.dash)
        cv.text(lx + 30, ly, s.label, scale=2)
    cv.text(left, top - 20, panel.ylabel, scale=2)
    if xlabel:
        cv.text((left + right) // 2 - 6 * len(xlabel), bottom + 34, xlabel, scale=2)


def write_chart(path, title, panels, xlabel="", width=1400, panel_height=360):
    """Panels stacked vertically over a shared x range."""
    height = 60 + len(panels) * (panel_height + 90)
    cv = Canvas(width, height)
    cv.text(20, 16, title, scale=2)
    xs = [x for p in panels for s in p.series for x in s.xs]
    xlo, xhi = min(xs), max(xs)
    if xhi <= xlo:
        xhi = xlo + 1
    for i, p in enumerate(panels):
        top = 70 + i * (panel_height + 90)
        draw_panel(cv, (130, top, width - 30, top + panel_height), p, xlo, xhi,
                   xlabel if i == len(panels) - 1 else "")
    with open(path, "wb") as f:
        f.write(cv.png())
