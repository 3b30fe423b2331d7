"""Every figure of docs/benchmarks.md, drawn from the measurements in benchmarks/results/.

    python benchmarks/figures.py [--out_dir=docs/images] [--results_dir=benchmarks/results]

Each JSON file in `--results_dir` holds one table of a page in docs/benchmarks/
(docs/benchmarks.md shows the figures), copied from the page: its `title`, the
`date` it was measured (YYYY-MM-DD), the `machine`, the `command` that
reproduces it, the `source` (the page's heading of its section), an optional
`note`, and its numbers as `panels`, drawn side by side. A panel is either

  {"kind": "bars", "value_label": "step (ms)", "categories": [...],
   "series": [{"label": ..., "values": [...], "low": [...], "high": [...]}]}

horizontal bars, one group per category; `low` and `high` (optional) draw
whiskers, and a value of null with both drawn as the middle of that range
(the page gave a range only). Optional: `marks` ({"label", "values"}, a tick
per category, e.g. a target) and `references` ([{"label", "value"}], a line
across the values). Or

  {"kind": "lines", "x_label": ..., "y_label": ..., "series": [{"label": ...,
   "x": [...], "y": [...], "point_labels": [...]}]}

with optional `x_scale` ("log" or "log2"), `x_ticks`, `references` (lines
across y), and `ideal_linear` (a dotted line scaling each series' first point
linearly in x). Either kind takes `title` and `legend` (false hides it, a string
places it: "lower right"); a series takes `color` ("C0", ...), `linestyle`
and, for lines, `marker` ("" for none), and one without `label` stays out of
the legend.

Each file becomes `<out_dir>/<name>.png` (name: the file's stem), with the
date, machine and command printed under the plot; one line is printed per
image. Every file is checked before any is drawn: one that cannot be drawn
is an error naming it and what it holds. A new measurement updates its JSON
file first, then the page's table, then the image from this command.
"""

import glob
import json
import math
import os
import re
import sys
import textwrap

from absl import app
from absl import flags

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_OUT_DIR = flags.DEFINE_string("out_dir", os.path.join(_REPO, "docs", "images"),
                               "Where the PNG images are written.")
_RESULTS_DIR = flags.DEFINE_string("results_dir", os.path.join(_REPO, "benchmarks", "results"),
                                   "The JSON files to draw, one per figure.")

# Small enough for a page, large enough to read: 700 x 350 pixels.
_SIZE_INCHES = (7, 3.5)
# The matplotlib that drew docs/images: another may draw other bytes from the same data, so
# tests/test_figures.py compares the bytes with this one only. Redraw all with a new one.
MATPLOTLIB = "3.11.2"
_DPI = 100
_TEXT_KEYS = ("title", "date", "machine", "command", "source")
_NAME = re.compile(r"^[a-z0-9_]+$")
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


def _is_number(value) -> bool:
  return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _numbers(where: str, values, *, length: int, nullable: bool = False) -> None:
  """Raises ValueError unless `values` is a list of `length` numbers (or nulls)."""
  if (not isinstance(values, list) or len(values) != length or
      not all(_is_number(v) or (nullable and v is None) for v in values)):
    kind = "numbers or nulls" if nullable else "numbers"
    raise ValueError(f"`{where}` must be a list of {length} {kind}. Received: {values!r}")


def _check_series(where: str, series, panel: dict) -> None:
  if not isinstance(series, dict):
    raise ValueError(f"`{where}` must be an object. Received: {series!r}")
  if "label" in series and not isinstance(series["label"], str):
    raise ValueError(f"`{where}.label` must be a string. Received: {series['label']!r}")
  if panel["kind"] == "bars":
    length = len(panel["categories"])
    _numbers(f"{where}.values", series.get("values"), length=length, nullable=True)
    for bound in ("low", "high"):
      if bound in series:
        _numbers(f"{where}.{bound}", series[bound], length=length, nullable=True)
    for index, value in enumerate(series["values"]):
      low, high = (series.get(b, [None] * length)[index] for b in ("low", "high"))
      if value is None and (low is None or high is None):
        raise ValueError(f"`{where}.values[{index}]` is null without a low and a high to draw "
                         f"instead. Received: low={low!r}, high={high!r}")
  else:
    x = series.get("x")
    length = len(x) if isinstance(x, list) else -1
    _numbers(f"{where}.x", x, length=max(length, 1))
    _numbers(f"{where}.y", series.get("y"), length=length)
    labels = series.get("point_labels", [""] * length)
    if not isinstance(labels, list) or len(labels) != length:
      raise ValueError(f"`{where}.point_labels` must be a list of {length} strings. "
                       f"Received: {labels!r}")


def _check_panel(where: str, panel) -> None:
  if not isinstance(panel, dict) or panel.get("kind") not in ("bars", "lines"):
    received = panel.get("kind") if isinstance(panel, dict) else panel
    raise ValueError(f"`{where}.kind` must be 'bars' or 'lines'. Received: {received!r}")
  labels = ("value_label",) if panel["kind"] == "bars" else ("x_label", "y_label")
  for key in labels:
    if not isinstance(panel.get(key), str) or not panel[key]:
      raise ValueError(f"`{where}.{key}` must name the axis and its unit. "
                       f"Received: {panel.get(key)!r}")
  if panel["kind"] == "bars":
    categories = panel.get("categories")
    if not isinstance(categories, list) or not categories or not all(
        isinstance(c, str) for c in categories):
      raise ValueError(f"`{where}.categories` must be a non-empty list of strings. "
                       f"Received: {categories!r}")
    if "marks" in panel:
      marks = panel["marks"]
      if not isinstance(marks, dict):
        raise ValueError(f"`{where}.marks` must be {{'label': ..., 'values': [...]}}. "
                         f"Received: {marks!r}")
      _numbers(f"{where}.marks.values", marks.get("values"), length=len(categories))
    if "x_scale" in panel:
      raise ValueError(f"`{where}.x_scale` is for a lines panel; bars have no x axis. "
                       f"Received: {panel['x_scale']!r}")
  if panel.get("x_scale", "linear") not in ("linear", "log", "log2"):
    raise ValueError(f"`{where}.x_scale` must be 'linear', 'log' or 'log2'. "
                     f"Received: {panel['x_scale']!r}")
  if not isinstance(panel.get("legend", True), (bool, str)):
    raise ValueError(f"`{where}.legend` must be true, false or a location such as 'lower right'. "
                     f"Received: {panel['legend']!r}")
  if "x_ticks" in panel:
    ticks = panel["x_ticks"]
    _numbers(f"{where}.x_ticks", ticks, length=len(ticks) if isinstance(ticks, list) else 1)
  if not isinstance(panel.get("references", []), list):
    raise ValueError(f"`{where}.references` must be a list. Received: {panel['references']!r}")
  for index, reference in enumerate(panel.get("references", [])):
    if not isinstance(reference, dict) or not _is_number(reference.get("value")):
      raise ValueError(f"`{where}.references[{index}]` must be {{'label': ..., 'value': a number}}. "
                       f"Received: {reference!r}")
  series = panel.get("series")
  if not isinstance(series, list) or not series:
    raise ValueError(f"`{where}.series` must be a non-empty list. Received: {series!r}")
  for index, one in enumerate(series):
    _check_series(f"{where}.series[{index}]", one, panel)
    if panel.get("x_scale", "linear") != "linear" and min(one["x"]) <= 0:
      raise ValueError(f"`{where}.series[{index}].x` must be positive on a log scale. "
                       f"Received: {one['x']!r}")


def load(path: str) -> dict:
  """The figure `path` describes; ValueError naming the file if it cannot be drawn."""
  with open(path) as f:
    text = f.read()
  try:
    figure = json.loads(text)
  except json.JSONDecodeError as e:
    raise ValueError(f"{path}: not JSON ({e}). Received: {text[:80]!r}") from None
  try:
    if not _NAME.match(os.path.splitext(os.path.basename(path))[0]):
      raise ValueError("its name must be lower-case letters, digits and underscores (it names "
                       f"the image). Received: {os.path.basename(path)!r}")
    if not isinstance(figure, dict):
      raise ValueError(f"it must hold an object. Received: {type(figure).__name__}")
    for key in _TEXT_KEYS:
      if not isinstance(figure.get(key), str) or not figure[key].strip():
        raise ValueError(f"`{key}` must be a non-empty string: every figure gives the title, "
                         f"date, machine, command and source of its numbers. Received: "
                         f"{key}={figure.get(key)!r}, keys {sorted(figure)}")
    if not _DATE.match(figure["date"]):
      raise ValueError(f"`date` must be YYYY-MM-DD. Received: {figure['date']!r}")
    panels = figure.get("panels")
    if not isinstance(panels, list) or not panels:
      raise ValueError(f"`panels` must be a non-empty list. Received: {panels!r}")
    for index, panel in enumerate(panels):
      _check_panel(f"panels[{index}]", panel)
  except ValueError as e:
    raise ValueError(f"{path}: {e}") from None
  return figure


def _number(value) -> str:
  """A number as the page writes it: 0.953 stays 0.953, 27068 stays 27068."""
  return str(int(value)) if isinstance(value, float) and value.is_integer() and value >= 100 \
      else str(value)


def _reference_style(index: int) -> dict:
  """Grey lines told apart by their dashes: references sit behind the data."""
  return {"color": "0.35", "linewidth": 1, "linestyle": (":", "--", "-.")[index % 3], "zorder": 1}


def _bars(axes, panel: dict, *, show_categories: bool) -> None:
  categories, series = panel["categories"], panel["series"]
  height = 0.8 / len(series)
  right = 0.0
  for index, one in enumerate(series):
    low = one.get("low", [None] * len(categories))
    high = one.get("high", [None] * len(categories))
    # A range with no value of its own is drawn to its middle, and labelled as the range.
    drawn = [v if v is not None else (lo + hi) / 2 for v, lo, hi in zip(one["values"], low, high)]
    positions = [c - 0.4 + height * (index + 0.5) for c in range(len(categories))]
    axes.barh(positions, drawn, height=0.9 * height, color=one.get("color", f"C{index}"),
              label=one.get("label"))
    for position, value, shown, lo, hi in zip(positions, one["values"], drawn, low, high):
      if lo is not None and hi is not None:
        axes.errorbar([shown], [position], xerr=[[shown - lo], [hi - shown]], fmt="none",
                      ecolor="black", elinewidth=0.8, capsize=2)
      text = _number(value) if value is not None else f"{_number(lo)}–{_number(hi)}"
      end = max(shown, hi if hi is not None else shown)
      right = max(right, end)
      axes.annotate(text, (end, position), xytext=(3, 0), textcoords="offset points",
                    va="center", fontsize=6.5)
  if "marks" in panel:
    axes.plot(panel["marks"]["values"], range(len(categories)), linestyle="none", marker="|",
              markersize=14, markeredgewidth=1.5, color="black", label=panel["marks"].get("label"))
    right = max(right, *panel["marks"]["values"])
  for index, reference in enumerate(panel.get("references", [])):
    axes.axvline(reference["value"], label=reference.get("label"), **_reference_style(index))
    right = max(right, reference["value"])
  axes.set_xlim(0, right * 1.2)  # Room for the values written after the bars.
  axes.set_yticks(range(len(categories)), categories if show_categories else [""] * len(categories))
  axes.invert_yaxis()  # The first category on top, as in the page's table.
  axes.set_xlabel(panel["value_label"])
  if panel.get("category_label"):
    axes.set_ylabel(panel["category_label"])


def _lines(axes, panel: dict) -> None:
  from matplotlib import ticker  # pylint: disable=import-outside-toplevel
  ideal_labelled = False
  for index, one in enumerate(panel["series"]):
    color = one.get("color", f"C{index}")
    axes.plot(one["x"], one["y"], marker=one.get("marker", "o"), markersize=3.5, linewidth=1.2, color=color,
              linestyle=one.get("linestyle", "-"), label=one.get("label"))
    for x, y, text in zip(one["x"], one["y"], one.get("point_labels", [])):
      axes.annotate(text, (x, y), xytext=(3, 3), textcoords="offset points", fontsize=6.5,
                    color=color)
    if panel.get("ideal_linear") and one["x"][0]:
      x0, y0 = one["x"][0], one["y"][0]
      axes.plot(one["x"], [y0 * x / x0 for x in one["x"]], linestyle=":", linewidth=1,
                color=color, label=None if ideal_labelled else "linear scaling")
      ideal_labelled = True
  for index, reference in enumerate(panel.get("references", [])):
    axes.axhline(reference["value"], label=reference.get("label"), **_reference_style(index))
  scale = panel.get("x_scale", "linear")
  if scale != "linear":
    axes.set_xscale("log", base=2 if scale == "log2" else 10)
  if "x_ticks" in panel:
    axes.set_xticks(panel["x_ticks"], [_number(t) for t in panel["x_ticks"]])
    axes.xaxis.set_minor_locator(ticker.NullLocator())
  if any(one.get("point_labels") for one in panel["series"]):
    axes.margins(x=0.1)  # Room for the labels of the last points.
  axes.set_ylim(bottom=0)  # Differences drawn to scale, not magnified.
  axes.set_xlabel(panel["x_label"])
  axes.set_ylabel(panel["y_label"])


def _page_of(source: str) -> str:
  """The docs page whose heading is `source` (its section holds the table), from the checkout."""
  pages = [os.path.join("docs", "benchmarks.md")] + sorted(
      os.path.relpath(path, _REPO) for path in glob.glob(os.path.join(_REPO, "docs", "benchmarks",
                                                                     "*.md")))
  for page in pages:
    with open(os.path.join(_REPO, page), encoding="utf-8") as f:
      if re.search(rf"^#+ {re.escape(source)}\s*$", f.read(), re.M):
        return page
  return pages[0]


def _caption(figure: dict, data_path: str) -> list:
  lines = [figure["note"]] if figure.get("note") else []
  lines += [f"Measured {figure['date']} on {figure['machine']}.",
            f"Command: {figure['command']}",
            f"Data: {data_path} ({_page_of(figure['source'])}, \"{figure['source']}\"); "
            "image: python benchmarks/figures.py"]
  return [wrapped for line in lines for wrapped in textwrap.wrap(line, 150)]


def draw(figure: dict, data_path: str, out_path: str) -> None:
  """Writes `figure` as a PNG to `out_path`, the same bytes for the same matplotlib."""
  import matplotlib  # pylint: disable=import-outside-toplevel
  matplotlib.use("Agg")
  from matplotlib import pyplot as plt  # pylint: disable=import-outside-toplevel
  # The default style, not the user's matplotlibrc: the image depends on the data only.
  with plt.style.context("default"):
    panels = figure["panels"]
    fig, axes = plt.subplots(1, len(panels), figsize=_SIZE_INCHES, dpi=_DPI, squeeze=False)
    previous_categories = None
    for panel, ax in zip(panels, axes[0]):
      ax.tick_params(labelsize=7)
      if panel["kind"] == "bars":
        # Panels side by side over the same categories name them once, on the left.
        _bars(ax, panel, show_categories=panel["categories"] != previous_categories)
        previous_categories = panel["categories"]
      else:
        _lines(ax, panel)
      ax.xaxis.label.set_size(7.5)
      ax.yaxis.label.set_size(7.5)
      if panel.get("title"):
        ax.set_title(panel["title"], fontsize=8)
      # A lone series needs no legend (its axis names it); a reference line or mark does.
      legend = panel.get("legend", True)
      entries = len(ax.get_legend_handles_labels()[1])
      if legend and (entries > 1 or (entries and (panel.get("references") or "marks" in panel))):
        ax.legend(fontsize=6.5, loc="best" if legend is True else legend, framealpha=0.8)
    fig.suptitle(figure["title"], fontsize=9.5)
    caption = _caption(figure, data_path)
    fig.text(0.01, 0.015, "\n".join(caption), fontsize=6, color="0.3", ha="left", va="bottom",
             linespacing=1.3)
    # Leave the caption's lines below the plots: 6 pt at 1.3 spacing each, plus a margin.
    bottom = (len(caption) * 6 * 1.3 + 6) / (72 * _SIZE_INCHES[1])
    fig.tight_layout(rect=(0, bottom, 1, 1), pad=0.6, w_pad=0.8)
    # No "Software" chunk naming the version: the bytes change only with the drawing.
    fig.savefig(out_path, dpi=_DPI, metadata={"Software": None})
    plt.close(fig)


def _shown(path: str) -> str:
  """`path` relative to the checkout where it lies inside it: the same text from any folder."""
  relative = os.path.relpath(os.path.abspath(path), _REPO)
  return path if relative.startswith("..") else relative


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"figures.py takes flags only. Received: {argv[1:]}")
  paths = sorted(glob.glob(os.path.join(_RESULTS_DIR.value, "*.json")))
  if not paths:
    raise SystemExit(f"figures.py: no JSON files in --results_dir. "
                     f"Received: {_RESULTS_DIR.value!r}")
  try:
    figures = [(path, load(path)) for path in paths]
  except ValueError as e:
    raise SystemExit(f"figures.py: {e}") from None
  os.makedirs(_OUT_DIR.value, exist_ok=True)
  for path, figure in figures:
    name = os.path.splitext(os.path.basename(path))[0]
    out_path = os.path.join(_OUT_DIR.value, name + ".png")
    draw(figure, _shown(path), out_path)
    print(f"wrote {_shown(out_path)}  ({figure['title']})", flush=True)
  return 0


if __name__ == "__main__":
  sys.exit(app.run(main))
