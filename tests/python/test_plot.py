"""epochfs-analyze --plot, read back as a person would read it, from the
SVG alone: no label runs into another (text boxes from the font size and
an upper bound of a character's width, rotated labels turned), every tick
label is the value its gridline stands at (ticks at round values, and the
measured dot where the ticks say its value is), the legend draws a sample
of every curve in the curve's own style, and two curves that coincide both
stay visible. The reports are the analyzer's own, from records made
through the timer's schema (test_report.py's part 7 job), with the
measured point moved to the panels' edges where labels collide most. And
the PNG, where rsvg-convert is installed."""
import copy
import os
import re
import shutil
import tempfile
import unittest
import xml.etree.ElementTree as ET

from epochfs import _plot, analyze

import test_report

NS = "{http://www.w3.org/2000/svg}"


def boxes(root):
    """(label, x0, y0, x1, y1) of every text element: the baseline at y, a
    glyph from 0.8 em above it to 0.25 em below, the width an upper bound
    (_plot.text_width), a rotate(-90 x y) turned about its anchor."""
    out = []
    for t in root.iter(NS + "text"):
        s = t.text or ""
        size = float(t.get("font-size"))
        x, y = float(t.get("x")), float(t.get("y"))
        w = _plot.text_width(s, size)
        anchor = t.get("text-anchor", "start")
        a = {"start": 0.0, "middle": 0.5, "end": 1.0}[anchor]
        if "rotate(-90" in (t.get("transform") or ""):
            # Turned a quarter to the left about (x, y): the text runs up.
            out.append((s, x - 0.8 * size, y - (1 - a) * w, x + 0.25 * size, y + a * w))
        else:
            out.append((s, x - a * w, y - 0.8 * size, x - a * w + w, y + 0.25 * size))
    return out


def overlaps(b):
    bad = []
    for i in range(len(b)):
        for j in range(i + 1, len(b)):
            p, q = b[i], b[j]
            if p[1] < q[3] and q[1] < p[3] and p[2] < q[4] and q[2] < p[4]:
                bad.append((p[0], q[0]))
    return bad


def panels(root):
    return [g for g in root.iter(NS + "g") if g.get("class") == "panel"]


class Plot(unittest.TestCase):
    def reports(self):
        """The part 7 report, and the same with the measured point at the
        panels' edges: cache 100% (the left panel's right edge, beside the
        right panel's axis label), 0.37 s where the curves reach 0.42 s."""
        rep = test_report.report(test_report.part7())
        edge = copy.deepcopy(rep)
        top = max(w["predicted_epoch_seconds"] for w in edge["what_if"])
        for w in edge["what_if"]:
            w["predicted_epoch_seconds"] *= 0.42 / top
        edge["epoch_seconds"] = 0.37
        edge["model"]["cache_fraction"] = 1.0
        low = copy.deepcopy(rep)
        low["model"]["cache_fraction"] = 0.0            # the left edge, and the top of the panel
        low["epoch_seconds"] = max(w["predicted_epoch_seconds"] for w in low["what_if"])
        return {"part 7": rep, "edges": edge, "top-left": low}

    def test_labels_do_not_overlap(self):
        for name, rep in self.reports().items():
            root = ET.fromstring(_plot.svg(rep))
            b = boxes(root)
            self.assertEqual(overlaps(b), [], name)
            w, h = float(root.get("width")), float(root.get("height"))
            for s, x0, y0, x1, y1 in b:
                self.assertTrue(0 <= x0 and x1 <= w and 0 <= y0 and y1 <= h, (name, s, x0, y0, x1, y1))
            # The measured label stays inside its own panel.
            for g in panels(root):
                frame = [r for r in g.iter(NS + "rect") if r.get("stroke")][0]
                fx0, fy0 = float(frame.get("x")), float(frame.get("y"))
                fx1, fy1 = fx0 + float(frame.get("width")), fy0 + float(frame.get("height"))
                for t in g.iter(NS + "text"):
                    if t.get("class") == "measured-label":
                        _, x0, y0, x1, y1 = boxes(ET.fromstring(
                            '<svg xmlns="http://www.w3.org/2000/svg">%s</svg>' % ET.tostring(t).decode()))[0]
                        self.assertTrue(fx0 <= x0 and x1 <= fx1 and fy0 <= y0 and y1 <= fy1, (name, x0, x1, fx1))

    def test_tick_labels_are_the_values_at_their_gridlines(self):
        for name, rep in self.reports().items():
            root = ET.fromstring(_plot.svg(rep))
            for g in panels(root):
                grid = sorted(float(l.get("y1")) for l in g.iter(NS + "line") if l.get("class") == "grid")
                ticks = [(float(t.text), float(t.get("y"))) for t in g.iter(NS + "text") if t.get("class") == "ytick"]
                self.assertGreaterEqual(len(ticks), 3, name)
                # Round values, equally spaced, from 0, each label beside its line.
                vals = [v for v, _ in ticks]
                step = vals[1] - vals[0]
                self.assertEqual(vals[0], 0.0)
                for i, v in enumerate(vals):
                    self.assertAlmostEqual(v, i * step, places=9, msg=(name, vals))
                m = step / 10 ** int(f"{step:e}".split("e")[1])
                self.assertIn(round(m, 6), (1.0, 2.0, 2.5, 5.0), (name, step))
                ys = sorted(y - 4 for _, y in ticks)
                self.assertEqual([round(y, 1) for y in ys], [round(y, 1) for y in grid], name)
                # The scale the labels imply puts the measured dot at its value.
                (v0, y0), (v1, y1) = ticks[0], ticks[-1]
                dot = [c for c in g.iter(NS + "circle") if c.get("class") == "measured"][0]
                v = float(dot.get("data-value"))
                want = (y0 - 4) + (v - v0) * ((y1 - 4) - (y0 - 4)) / (v1 - v0)
                self.assertAlmostEqual(float(dot.get("cy")), want, delta=0.5, msg=(name, v))
                # Every curve under the top tick: the axis ends at a tick.
                for p in g.iter(NS + "path"):
                    for y in re.findall(r"[ML][-\d.]+,([-\d.]+)", p.get("d")):
                        self.assertGreaterEqual(float(y), min(grid) - 0.01)
        # The ticks the issue saw: 0.37 s under a gridline labelled 0.4 that
        # was 0.42. Now the labels are the values: 0.1 steps to 0.5.
        self.assertEqual(_plot.nice_ticks(0.42 * 1.05), ([0.0, 0.1, 0.2, 0.3, 0.4, 0.5], 1))
        self.assertEqual(_plot.nice_ticks(11.0), ([0.0, 2.5, 5.0, 7.5, 10.0, 12.5], 1))
        self.assertEqual(_plot.nice_ticks(0.23)[1], 2)

    def test_legend_samples_every_curve_and_both_stay_visible(self):
        root = ET.fromstring(_plot.svg(self.reports()["part 7"]))
        for g in panels(root):
            paths = [p for p in g.iter(NS + "path") if p.get("class") == "series"]
            self.assertEqual(len(paths), 2)
            samples = {l.get("data-name"): l for l in g.iter(NS + "line") if l.get("class") == "legend-sample"}
            legend = [t.text for t in g.iter(NS + "text") if t.get("class") == "legend"]
            for p in paths:
                name = p.get("data-name")
                self.assertIn(name, samples)
                self.assertIn(name, legend)
                s = samples[name]
                for k in ("stroke", "stroke-width", "stroke-dasharray"):
                    self.assertEqual(s.get(k), p.get(k), (name, k))
                self.assertGreater(float(s.get("x2")) - float(s.get("x1")), 20)
            # Drawn in order: the later curve is dashed and thinner, in
            # another color, so the earlier shows through where they meet.
            under, over = paths
            self.assertIsNone(under.get("stroke-dasharray"))
            self.assertTrue(over.get("stroke-dasharray"))
            self.assertLess(float(over.get("stroke-width")), float(under.get("stroke-width")))
            self.assertNotEqual(over.get("stroke"), under.get("stroke"))
            self.assertIn("measured (the job as it is)", legend)
        names = [p.get("data-name") for p in root.iter(NS + "path")]
        self.assertEqual(names[:2], ["epochfs (MinIO cache)", "page cache (LRU)"])
        # The cache sizes and worker counts the memory cannot hold are
        # shaded, from the measured ones on (the job is at its limit, and a
        # third worker needs memory), each in its panel's legend.
        for g in panels(root):
            shade = [r for r in g.iter(NS + "rect") if r.get("class") == "shade"]
            self.assertEqual(len(shade), 1)
            frame = [r for r in g.iter(NS + "rect") if r.get("stroke")][0]
            dot = [c for c in g.iter(NS + "circle") if c.get("class") == "measured"][0]
            self.assertAlmostEqual(float(shade[0].get("x")), float(dot.get("cx")), delta=0.1)
            self.assertAlmostEqual(float(shade[0].get("x")) + float(shade[0].get("width")),
                                   float(frame.get("x")) + float(frame.get("width")), delta=0.1)
            self.assertIn("more memory than the job has", [t.text for t in g.iter(NS + "text")])

    @unittest.skipUnless(shutil.which("rsvg-convert"), "rsvg-convert is not installed (librsvg2-bin)")
    def test_png(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "p.png")
            _plot.write(path, self.reports()["part 7"])
            with open(path, "rb") as f:
                head = f.read(24)
            self.assertEqual(head[:8], b"\x89PNG\r\n\x1a\n")
            width = int.from_bytes(head[16:20], "big")
            self.assertEqual(width, _plot.W)

    def test_the_analyzer_writes_it(self):
        import io
        from contextlib import redirect_stdout
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "p.svg")
            with redirect_stdout(io.StringIO()):
                rc = analyze._output({"json": None, "plot": path, "verbose": False}, self.reports()["part 7"])
            self.assertEqual(rc, 0)
            self.assertEqual(ET.parse(path).getroot().tag, NS + "svg")

if __name__ == "__main__":
    unittest.main()
