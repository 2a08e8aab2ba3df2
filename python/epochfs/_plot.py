"""epochfs-analyze --plot: the what-if curves of a report, drawn as SVG with
the standard library; PNG is the same SVG rendered by rsvg-convert (or, where
that is missing, drawn again by matplotlib).

Two panels: predicted epoch seconds against cache size (% of the data; the
MinIO cache and the kernel's page cache) and against DataLoader workers
(on the CPUs there are, and with a core per worker), each with the job's
measured epoch marked where it was measured. Cache sizes and worker
counts the job's memory cannot hold are shaded.

DESIGN: every element is placed in the drawing's own coordinates (no
nested transforms), so that tests/python/test_plot.py can check what a
reader sees from the SVG alone: no two labels overlap (their boxes from the
font size and an upper bound of a character's width), each tick label is
the value at its gridline (ticks at round values, placed exactly, the axis
ending at a tick), the legend draws a sample of every curve, and curves
that coincide stay visible (the one drawn later is dashed and thinner, so
the one under it shows through its gaps). Labels stay inside their panel:
the measured epoch's label goes to a corner of its dot inside the panel
and clear of the curves where one is, and the legends sit under the
panels, where no curve is.
"""
import html
import math
import os
import shutil
import subprocess

FONT = 11                   # tick labels, legends, the measured label
CHAR_W = 0.62               # an upper bound of a sans-serif character's width, in ems
PANEL_W, PANEL_H = 380, 250
LEFT, TOP = 78, 64          # the left panel's corner: room for tick labels and the axis label
GAP = 100                   # between the panels: the right one's tick labels and axis label
LEGEND_ROW = 17
W = LEFT + 2 * PANEL_W + GAP + 30

# The curves: (color, width, dash). The second of a panel is drawn over
# the first, dashed and thinner: where they coincide, both show.
STYLES = {"epochfs (MinIO cache)": ("#1f77b4", 3.0, None),
          "page cache (LRU)": ("#555555", 1.8, "7 4"),
          "on these CPUs": ("#1f77b4", 3.0, None),
          "a core per worker": ("#2ca02c", 1.8, "7 4")}
MEASURED = "#d62728"
SHADE = "#f6d5d5"


def text_width(s, size=FONT):
    """An upper bound of the width of S in pixels at SIZE (the tests use
    the same bound)."""
    return len(s) * size * CHAR_W


def nice_ticks(top, n=5):
    """Ticks at round values from 0 to at least TOP: about N steps of 1, 2,
    2.5 or 5 times a power of ten, the last tick at or above TOP. Returns
    (ticks, decimals to print them exactly)."""
    top = top if top > 0 else 1.0
    raw = top / n
    mag = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 2.5, 5, 10):
        if m * mag >= raw:
            step = m * mag
            break
    k = int(math.ceil(top / step - 1e-9))
    decimals = max(0, -int(math.floor(math.log10(step) + 1e-9)) + (1 if step / mag == 2.5 else 0))
    return [round(i * step, decimals + 2) for i in range(k + 1)], decimals


def _series(rep):
    wi = rep.get("what_if", [])
    mod = rep.get("model", {})
    job = rep.get("job", {})
    cache, short = {}, []
    for r in wi:
        if set(r) >= {"cache", "cache_kind"} and "workers" not in r and not r.get("requested"):
            cache.setdefault(r["cache_kind"], []).append((r["cache"], r["predicted_epoch_seconds"]))
            if r["cache_kind"] == "minio" and (r.get("memory_needed_bytes") or 0) > 0:
                short.append(r["cache"])
    workers = {"on these CPUs": [], "a core per worker": []}
    fit_w, short_w = [], []
    for r in wi:
        if "workers" in r and "cache" not in r and not r.get("requested"):
            key = "a core per worker" if "cores" in r else "on these CPUs"
            workers[key].append((r["workers"], r["predicted_epoch_seconds"]))
            if key == "on these CPUs":
                (short_w if (r.get("memory_needed_bytes") or 0) > 0 else fit_w).append(r["workers"])
    measured_cache = measured_workers = None
    if rep.get("epoch_seconds") is not None and mod.get("cache_fraction") is not None:
        measured_cache = (min(100.0, 100 * mod["cache_fraction"]), rep["epoch_seconds"])
        measured_workers = (job.get("workers"), rep["epoch_seconds"])
    # Where the cache needs more memory than the job has: from the largest
    # size that fits (the model's), else the smallest sweep point that
    # does not (a bigger cache needs more still).
    fits = mod.get("cache_fits_up_to")
    shade_from = 100 * fits if fits is not None else (min(short) if short else None)
    # And the worker counts that need more: from the most that fit below
    # the first that does not (more workers need more memory still).
    shade_w = None
    if short_w:
        below = [w for w in fit_w if w < min(short_w)]
        shade_w = max(below) if below else min(short_w)
    return cache, workers, measured_cache, measured_workers, (shade_from, shade_w)


def _text(out, x, y, s, size=FONT, anchor="start", color=None, cls=None, rotate=False, halo=False):
    attrs = ['x="%.1f"' % x, 'y="%.1f"' % y, 'font-size="%d"' % size]
    if anchor != "start":
        attrs.append('text-anchor="%s"' % anchor)
    if color:
        attrs.append('fill="%s"' % color)
    if cls:
        attrs.append('class="%s"' % cls)
    if rotate:
        attrs.append('transform="rotate(-90 %.1f %.1f)"' % (x, y))
    if halo:
        # A white outline under the glyphs: legible where a curve passes.
        attrs.append('stroke="white" stroke-width="3" paint-order="stroke"')
    out.append("<text %s>%s</text>" % (" ".join(attrs), html.escape(s)))


def _line_attrs(color, width, dash):
    a = 'stroke="%s" stroke-width="%.1f" fill="none"' % (color, width)
    if dash:
        a += ' stroke-dasharray="%s"' % dash
    return a


def _crosses(box, lines):
    """Whether a curve (LINES: lists of points) passes through BOX (x0, y0,
    x1, y1): its segments sampled every 2 pixels."""
    bx0, by0, bx1, by1 = box
    for pts in lines:
        for (xa, ya), (xb, yb) in zip(pts, pts[1:]):
            n = max(1, int(max(abs(xb - xa), abs(yb - ya)) / 2))
            for i in range(n + 1):
                x, y = xa + (xb - xa) * i / n, ya + (yb - ya) * i / n
                if bx0 <= x <= bx1 and by0 <= y <= by1:
                    return True
    return False


def _place(label, cx, cy, frame, lines):
    """Where the measured label goes: (x, baseline, anchor) beside the dot
    at (CX, CY), inside FRAME (the panel), clear of the curves where one of
    the four corners around the dot is; else the first that fits."""
    w, fx0, fy0, fx1, fy1 = text_width(label), frame[0], frame[1], frame[2], frame[3]
    fits = []
    for dx, dy in ((1, -1), (1, 1), (-1, -1), (-1, 1)):
        lx = cx + 8 if dx > 0 else cx - 8
        ly = cy - 8 if dy < 0 else cy + 8 + FONT
        box = (lx if dx > 0 else lx - w, ly - 0.8 * FONT, lx + w if dx > 0 else lx, ly + 0.25 * FONT)
        if box[0] < fx0 + 2 or box[2] > fx1 - 2 or box[1] < fy0 + 2 or box[3] > fy1 - 2:
            continue
        fits.append((lx, ly, "start" if dx > 0 else "end"))
        if not _crosses(box, lines):
            return fits[-1]
    if fits:
        return fits[0]
    return cx + 8, cy - 8, "start"


def _panel(out, x0, title, xlabel, series, point, ticks, decimals, xticks, xmin, xmax, shade_from=None):
    """One panel with its corner at (X0, TOP); SERIES: {name: points}, drawn
    in that order; POINT: the measured (x, y) or None."""
    ymax = ticks[-1]
    y0 = TOP + PANEL_H

    def px(x):
        return x0 + (x - xmin) / ((xmax - xmin) or 1) * PANEL_W

    def py(y):
        return y0 - min(y, ymax) / ymax * PANEL_H
    out.append('<g class="panel">')
    if shade_from is not None:
        out.append('<rect class="shade" x="%.1f" y="%d" width="%.1f" height="%d" fill="%s"/>'
                   % (px(shade_from), TOP, px(xmax) - px(shade_from), PANEL_H, SHADE))
    for v in ticks:
        out.append('<line class="grid" x1="%d" x2="%d" y1="%.2f" y2="%.2f" stroke="#dddddd"/>'
                   % (x0, x0 + PANEL_W, py(v), py(v)))
        _text(out, x0 - 6, py(v) + 4, "%.*f" % (decimals, v), anchor="end", cls="ytick")
    for x in xticks:
        _text(out, px(x), y0 + 16, "%g" % x, anchor="middle", cls="xtick")
    out.append('<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#444444"/>'
               % (x0, TOP, PANEL_W, PANEL_H))
    _text(out, x0 + PANEL_W / 2, TOP - 12, title, size=14, anchor="middle", cls="title")
    _text(out, x0 + PANEL_W / 2, y0 + 34, xlabel, size=12, anchor="middle", cls="xlabel")
    ylw = max(text_width("%.*f" % (decimals, v)) for v in ticks)
    _text(out, x0 - 6 - ylw - 10, TOP + PANEL_H / 2, "epoch (s)", size=12, anchor="middle", cls="ylabel",
          rotate=True)
    drawn, lines = [], []
    for name, pts in series.items():
        if not pts:
            continue
        color, width, dash = STYLES.get(name, ("#000000", 2.0, None))
        pts = sorted(pts)
        lines.append([(px(x), py(y)) for x, y in pts])
        d = " ".join("%s%.1f,%.1f" % ("M" if i == 0 else "L", px(x), py(y)) for i, (x, y) in enumerate(pts))
        out.append('<path class="series" data-name="%s" d="%s" %s/>'
                   % (html.escape(name), d, _line_attrs(color, width, dash)))
        drawn.append(name)
    if point and point[0] is not None:
        cx, cy = px(point[0]), py(point[1])
        out.append('<circle class="measured" data-value="%r" cx="%.2f" cy="%.2f" r="5" fill="%s"/>'
                   % (point[1], cx, cy, MEASURED))
        label = "measured %.2f s" % point[1]
        lx, ly, anchor = _place(label, cx, cy, (x0, TOP, x0 + PANEL_W, y0), lines)
        _text(out, lx, ly, label, color=MEASURED, anchor=anchor, cls="measured-label", halo=True)
    # The legend, under the panel: a sample of each curve, the measured
    # dot, the shaded sizes.
    ly = y0 + 58
    for name in drawn:
        color, width, dash = STYLES.get(name, ("#000000", 2.0, None))
        out.append('<line class="legend-sample" data-name="%s" x1="%d" x2="%d" y1="%d" y2="%d" %s/>'
                   % (html.escape(name), x0, x0 + 34, ly - 4, ly - 4, _line_attrs(color, width, dash)))
        _text(out, x0 + 42, ly, name, cls="legend")
        ly += LEGEND_ROW
    if point and point[0] is not None:
        out.append('<circle class="legend-sample" cx="%d" cy="%d" r="5" fill="%s"/>' % (x0 + 17, ly - 4, MEASURED))
        _text(out, x0 + 42, ly, "measured (the job as it is)", cls="legend")
        ly += LEGEND_ROW
    if shade_from is not None:
        out.append('<rect class="legend-sample" x="%d" y="%d" width="34" height="10" fill="%s"/>'
                   % (x0, ly - 9, SHADE))
        _text(out, x0 + 42, ly, "more memory than the job has", cls="legend")
        ly += LEGEND_ROW
    out.append("</g>")
    return ly


def svg(rep):
    cache, workers, mc, mw, (shade_from, shade_w) = _series(rep)
    ys = [y for s in list(cache.values()) + list(workers.values()) for _, y in s]
    ys += [p[1] for p in (mc, mw) if p]
    ticks, decimals = nice_ticks(max(ys) * 1.05 if ys else 1.0)
    names = {"minio": "epochfs (MinIO cache)", "pagecache": "page cache (LRU)"}
    body = []
    bottom = _panel(body, LEFT, "vs cache size", "cache (% of the data)",
                    {names.get(k, k): cache[k] for k in ("minio", "pagecache") if k in cache}, mc, ticks, decimals,
                    list(range(0, 101, 20)), 0, 100, shade_from)
    wx = [x for s in workers.values() for x, _ in s] or [1, 2]
    lo, hi = min(wx), max(wx)
    if hi - lo <= 12:
        xt = list(range(int(lo), int(hi) + 1))
    else:
        step = nice_ticks(hi - lo, 6)[0][1]
        xt = [lo] + [x for x in range(int(math.ceil(lo / step) * step), int(hi) + 1, int(step)) if x > lo]
    bottom = max(bottom, _panel(body, LEFT + PANEL_W + GAP, "vs DataLoader workers", "workers", workers, mw,
                                ticks, decimals, xt, lo, hi, shade_w))
    h = bottom + 4
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif">' % (W, h),
           '<rect width="100%" height="100%" fill="white"/>']
    _text(out, W / 2, 26, "epochfs-analyze: predicted epoch time", size=16, anchor="middle", cls="title")
    out.extend(body)
    out.append("</svg>")
    return "\n".join(out) + "\n"


def write(path, rep):
    if path.endswith(".svg"):
        with open(path, "w") as f:
            f.write(svg(rep))
        return
    conv = shutil.which("rsvg-convert")
    if conv:
        tmp = path + ".svg.tmp"
        with open(tmp, "w") as f:
            f.write(svg(rep))
        try:
            r = subprocess.run([conv, "-f", "png", "-o", path, tmp], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               timeout=60)
        finally:
            os.unlink(tmp)
        if r.returncode == 0:
            return
        raise RuntimeError("rsvg-convert: %s" % r.stderr.decode(errors="replace").strip())
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise RuntimeError("PNG needs rsvg-convert (librsvg2-bin) or matplotlib, and neither is installed; "
                           "write .svg instead")
    cache, workers, mc, mw, (shade_from, shade_w) = _series(rep)
    names = {"minio": "epochfs (MinIO cache)", "pagecache": "page cache (LRU)"}
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4.2))
    for ax, series, point in ((a, {names.get(k, k): v for k, v in sorted(cache.items())}, mc), (b, workers, mw)):
        for name, pts in series.items():
            if not pts:
                continue
            color, width, dash = STYLES.get(name, ("#000000", 2.0, None))
            pts = sorted(pts)
            ax.plot([x for x, _ in pts], [y for _, y in pts], label=name, color=color, linewidth=width,
                    linestyle=(0, tuple(float(v) for v in dash.split())) if dash else "-")
        if point and point[0] is not None:
            ax.plot([point[0]], [point[1]], "o", color=MEASURED, label="measured %.2f s" % point[1])
        ax.set_ylim(bottom=0)
        ax.set_ylabel("epoch (s)")
        ax.legend()
    if shade_from is not None:
        a.axvspan(shade_from, 100, color=SHADE, label="more memory than the job has")
        a.legend()
    if shade_w is not None:
        b.axvspan(shade_w, max(x for pts in workers.values() for x, _ in pts), color=SHADE,
                  label="more memory than the job has")
        b.legend()
    a.set_xlabel("cache (% of the data)")
    b.set_xlabel("DataLoader workers")
    fig.tight_layout()
    fig.savefig(path)
