#!/usr/bin/env python3
"""A dependency-free SVG line chart for benchmark reports.

    plot_svg.py IN.json OUT.svg

IN.json: {"title": str, "x_label": str, "y_label": str,
          "series": [{"name": str, "points": [[x, y], ...]}, ...]}
X values are placed as categories (evenly spaced, in the order of the first
series), which suits batch sizes such as 1, 16, 32, 64. Each point is labelled
with its value. With "numeric_x": true the x axis is linear instead (time
series: six ticks, no markers or labels on the points).
"""
import json
import sys
from html import escape

W, H = 640, 400
LEFT, RIGHT, TOP, BOTTOM = 70, 20, 40, 60
COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e"]


def nice_max(v):
    if v <= 0:
        return 1.0
    mag = 10 ** len(str(int(v))) / 10
    for step in (1, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10):
        if step * mag >= v:
            return step * mag
    return 10 * mag


def render(spec):
    numeric = spec.get("numeric_x", False)
    xs = [p[0] for p in spec["series"][0]["points"]]
    xmax = max((p[0] for s in spec["series"] for p in s["points"]), default=1) or 1
    ymax = nice_max(max(p[1] for s in spec["series"] for p in s["points"]) * 1.1)
    pw, ph = W - LEFT - RIGHT, H - TOP - BOTTOM

    def px(x):
        if numeric:
            return LEFT + pw * x / xmax
        i = xs.index(x)
        return LEFT + (pw * (i + 0.5) / len(xs))

    def py(y):
        return TOP + ph * (1 - y / ymax)

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{W / 2}" y="22" text-anchor="middle" font-size="15">{escape(spec["title"])}</text>']
    for k in range(6):
        y = ymax * k / 5
        out.append(f'<line x1="{LEFT}" x2="{W - RIGHT}" y1="{py(y):.1f}" y2="{py(y):.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{LEFT - 6}" y="{py(y) + 4:.1f}" text-anchor="end">{y:g}</text>')
    ticks = [xmax * k / 5 for k in range(6)] if numeric else xs
    for x in ticks:
        out.append(f'<text x="{px(x):.1f}" y="{TOP + ph + 18}" text-anchor="middle">{escape(f"{x:g}" if numeric else str(x))}</text>')
    out.append(f'<text x="{LEFT + pw / 2}" y="{H - 18}" text-anchor="middle">{escape(spec["x_label"])}</text>')
    out.append(f'<text transform="translate(18,{TOP + ph / 2}) rotate(-90)" text-anchor="middle">'
               f'{escape(spec["y_label"])}</text>')
    for i, s in enumerate(spec["series"]):
        c = COLORS[i % len(COLORS)]
        pts = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in s["points"])
        out.append(f'<polyline points="{pts}" fill="none" stroke="{c}" stroke-width="2"/>')
        for x, y in ([] if numeric else s["points"]):
            out.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3.5" fill="{c}"/>')
            out.append(f'<text x="{px(x):.1f}" y="{py(y) - 8:.1f}" text-anchor="middle" fill="{c}">{y:.0f}</text>')
        ly = TOP + 16 * i
        out.append(f'<rect x="{LEFT + 10}" y="{ly + 2}" width="12" height="3" fill="{c}"/>')
        out.append(f'<text x="{LEFT + 28}" y="{ly + 8}">{escape(s["name"])}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    with open(sys.argv[1]) as f:
        spec = json.load(f)
    with open(sys.argv[2], "w") as f:
        f.write(render(spec))


if __name__ == "__main__":
    main()
