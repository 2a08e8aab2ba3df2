"""epochfs-analyze --plot: the what-if curves of a report, drawn as SVG with
the standard library (or PNG through matplotlib where it is installed).

Two panels: predicted epoch seconds against cache size (% of the data; the
MinIO cache and the kernel's page cache) and against DataLoader workers
(on the CPUs there are, and with a core per worker), each with the job's
measured epoch marked where it was measured.
"""
import html

W, H = 980, 380
PANEL_W, PANEL_H = 380, 260
LEFT, TOP = 70, 60


def _series(rep):
    wi = rep.get("what_if", [])
    mod = rep.get("model", {})
    job = rep.get("job", {})
    cache = {}
    for r in wi:
        if set(r) >= {"cache", "cache_kind"} and "workers" not in r and not r.get("requested"):
            cache.setdefault(r["cache_kind"], []).append((r["cache"], r["predicted_epoch_seconds"]))
    workers = {"on these CPUs": [], "a core per worker": []}
    for r in wi:
        if "workers" in r and "cache" not in r and not r.get("requested"):
            key = "a core per worker" if "cores" in r else "on these CPUs"
            workers[key].append((r["workers"], r["predicted_epoch_seconds"]))
    measured_cache = measured_workers = None
    if rep.get("epoch_seconds") is not None and mod.get("cache_fraction") is not None:
        measured_cache = (min(100.0, 100 * mod["cache_fraction"]), rep["epoch_seconds"])
        measured_workers = (job.get("workers"), rep["epoch_seconds"])
    return cache, workers, measured_cache, measured_workers


def _panel(out, x0, title, xlabel, series, point, ymax, xmin, xmax, colors, integer_x=False):
    out.append('<g transform="translate(%d,%d)">' % (x0, TOP))
    out.append('<rect x="0" y="0" width="%d" height="%d" fill="none" stroke="#444"/>' % (PANEL_W, PANEL_H))
    out.append('<text x="%d" y="-12" text-anchor="middle" font-size="14">%s</text>'
               % (PANEL_W // 2, html.escape(title)))
    out.append('<text x="%d" y="%d" text-anchor="middle" font-size="12">%s</text>'
               % (PANEL_W // 2, PANEL_H + 36, html.escape(xlabel)))
    out.append('<text transform="translate(-48,%d) rotate(-90)" text-anchor="middle" font-size="12">'
               'epoch (s)</text>' % (PANEL_H // 2))
    span = (xmax - xmin) or 1

    def px(x):
        return (x - xmin) / span * PANEL_W

    def py(y):
        return PANEL_H - min(y, ymax) / ymax * PANEL_H
    for i in range(6):
        y = ymax * i / 5
        out.append('<line x1="0" x2="%d" y1="%.1f" y2="%.1f" stroke="#ddd"/>' % (PANEL_W, py(y), py(y)))
        out.append('<text x="-6" y="%.1f" text-anchor="end" font-size="11">%.1f</text>' % (py(y) + 4, y))
    ticks = [xmin + span * i / 5 for i in range(6)]
    if integer_x and xmax - xmin <= 12:
        ticks = list(range(int(xmin), int(xmax) + 1))
    for x in ticks:
        out.append('<text x="%.1f" y="%d" text-anchor="middle" font-size="11">%g</text>'
                   % (px(x), PANEL_H + 16, round(x, 1)))
    ly = 14
    for (name, pts), color in zip(series.items(), colors):
        if not pts:
            continue
        pts = sorted(pts)
        d = " ".join("%s%.1f,%.1f" % ("M" if i == 0 else "L", px(x), py(y)) for i, (x, y) in enumerate(pts))
        out.append('<path d="%s" fill="none" stroke="%s" stroke-width="2"/>' % (d, color))
        out.append('<text x="%d" y="%d" font-size="11" fill="%s" text-anchor="end">%s</text>'
                   % (PANEL_W - 8, ly, color, html.escape(name)))
        ly += 14
    if point and point[0] is not None:
        out.append('<circle cx="%.1f" cy="%.1f" r="5" fill="#d62728"/>' % (px(point[0]), py(point[1])))
        out.append('<text x="%.1f" y="%.1f" font-size="11" fill="#d62728">measured %.2f s</text>'
                   % (px(point[0]) + 8, py(point[1]) - 8, point[1]))
    out.append("</g>")


def svg(rep):
    cache, workers, mc, mw = _series(rep)
    ys = [y for s in list(cache.values()) + list(workers.values()) for _, y in s]
    ys += [p[1] for p in (mc, mw) if p]
    ymax = max(ys) * 1.15 if ys else 1.0
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif">' % (W, H),
           '<rect width="100%" height="100%" fill="white"/>',
           '<text x="%d" y="24" text-anchor="middle" font-size="16">epochfs-analyze: predicted epoch time</text>'
           % (W // 2)]
    names = {"minio": "epochfs (MinIO cache)", "pagecache": "page cache (LRU)"}
    _panel(out, LEFT, "vs cache size", "cache (% of the data)",
           {names.get(k, k): v for k, v in sorted(cache.items())}, mc, ymax, 0, 100, ["#1f77b4", "#7f7f7f"])
    wx = [x for s in workers.values() for x, _ in s] or [1, 2]
    _panel(out, LEFT + PANEL_W + 80, "vs DataLoader workers", "workers", workers, mw, ymax,
           min(wx), max(wx), ["#1f77b4", "#2ca02c"], integer_x=True)
    out.append("</svg>")
    return "\n".join(out) + "\n"


def write(path, rep):
    if path.endswith(".svg"):
        with open(path, "w") as f:
            f.write(svg(rep))
        return
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise RuntimeError("PNG needs matplotlib (not installed); write .svg instead")
    cache, workers, mc, mw = _series(rep)
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    for k, pts in sorted(cache.items()):
        pts = sorted(pts)
        a.plot([x for x, _ in pts], [y for _, y in pts], label=k)
    if mc:
        a.plot([mc[0]], [mc[1]], "o", color="#d62728", label="measured")
    a.set_xlabel("cache (% of the data)")
    a.set_ylabel("epoch (s)")
    a.legend()
    for k, pts in workers.items():
        pts = sorted(pts)
        b.plot([x for x, _ in pts], [y for _, y in pts], label=k)
    if mw and mw[0] is not None:
        b.plot([mw[0]], [mw[1]], "o", color="#d62728", label="measured")
    b.set_xlabel("DataLoader workers")
    b.legend()
    fig.tight_layout()
    fig.savefig(path)
