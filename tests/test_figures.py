"""benchmarks/figures.py: one command draws every image the docs show, from the pages' own numbers.

The numbers live on the benchmarks pages under docs/benchmarks/, one table each in the
section a results file's "source" names; docs/benchmarks.md, the overview, shows the
figures, each beside a link to that section."""

import datetime
import glob
import json
import os
import pathlib
import re
import unicodedata
import warnings

import pytest

import helpers

SCRIPT = os.path.join(helpers.REPO, "benchmarks", "figures.py")
RESULTS = os.path.join(helpers.REPO, "benchmarks", "results")
DOCS = os.path.join(helpers.REPO, "docs")
IMAGES = os.path.join(DOCS, "images")
OVERVIEW = os.path.join(DOCS, "benchmarks.md")
DETAIL_PAGES = os.path.join(DOCS, "benchmarks")
_IMAGE_LINK = re.compile(r"!\[[^\]]*\]\(([^)\s]+\.png)\)")
_HEADING = re.compile(r"^#{1,6} (.+)$", re.M)


def _results():
  """{name: figure} for every results file; the command draws each as <name>.png."""
  figures = {}
  for path in sorted(glob.glob(os.path.join(RESULTS, "*.json"))):
    with open(path) as f:
      figures[os.path.splitext(os.path.basename(path))[0]] = json.load(f)
  return figures


def _png_size(path):
  """(width, height) from a PNG's header."""
  with open(path, "rb") as f:
    header = f.read(24)
  assert header[:8] == b"\x89PNG\r\n\x1a\n", path
  return int.from_bytes(header[16:20], "big"), int.from_bytes(header[20:24], "big")


def _benchmark_pages():
  """The overview, then every page under docs/benchmarks/."""
  return [OVERVIEW] + sorted(glob.glob(os.path.join(DETAIL_PAGES, "*.md")))


def _sections(page):
  """(heading, text) of each section of `page`: the text under a heading, up to the next
  heading of any level."""
  with open(page) as f:
    text = f.read()
  headings = list(_HEADING.finditer(text))
  return [(match.group(1).strip(),
           text[match.end():headings[index + 1].start() if index + 1 < len(headings) else None])
          for index, match in enumerate(headings)]


def _slug(heading):
  """The anchor the site gives `heading`: Python-Markdown's toc slug of its text."""
  text = unicodedata.normalize("NFKD", heading.replace("`", ""))
  text = re.sub(r"[^\w\s-]", "", text.encode("ascii", "ignore").decode("ascii")).strip().lower()
  return re.sub(r"[-\s]+", "-", text)


def _source(heading):
  """(page, text) of the one section of the benchmarks pages headed `heading`."""
  found = [(page, text) for page in _benchmark_pages() for found_heading, text in _sections(page)
           if found_heading == heading]
  assert len(found) == 1, f"{len(found)} sections of the benchmarks pages are headed {heading!r}"
  return found[0]


def _overview_shows_beside_a_link(name, page, heading):
  """Whether a section of the overview shows images/<name>.png and links to `heading` on
  `page`."""
  link = f"({os.path.relpath(page, DOCS)}#{_slug(heading)})"
  return any(f"(images/{name}.png)" in text and link in text
             for _, text in _sections(OVERVIEW))


def _numbers(figure):
  """Every number a figure draws: bar values and whiskers, points, marks and reference lines."""
  for panel in figure["panels"]:
    for series in panel["series"]:
      for key in ("values", "low", "high", "x", "y"):
        yield from (v for v in series.get(key, []) if v is not None)
    yield from panel.get("marks", {}).get("values", [])
    yield from (reference["value"] for reference in panel.get("references", []))


def _written(value, text):
  """Whether `text` writes `value` as the page does: 20520 as 20,520, 3.7 as 3.70."""
  forms = {str(value), f"{value:,}"}
  if isinstance(value, float) and value.is_integer():
    forms.add(str(int(value)))
  trailing = "0*" if isinstance(value, float) else ""
  pattern = r"(?<![\d.,])(?:" + "|".join(map(re.escape, forms)) + ")" + trailing + r"(?![\d])"
  return re.search(pattern, text) is not None


def _shown_images():
  """(page, image path as written, resolved path) for every PNG a page of the site shows."""
  for folder, _, files in os.walk(DOCS):
    for name in files:
      if name.endswith(".md"):
        page = os.path.join(folder, name)
        with open(page) as f:
          for link in _IMAGE_LINK.findall(f.read()):
            yield (os.path.relpath(page, helpers.REPO), link,
                   os.path.normpath(os.path.join(folder, link)))


@pytest.mark.slow  # Thirteen figures drawn with matplotlib: about 3 s.
def test_the_command_draws_every_results_file_as_a_small_png(tmp_path):
  done = helpers.run(helpers.python(SCRIPT, f"--out_dir={tmp_path}"), timeout=120)
  assert done.returncode == 0, done.stdout[-3000:]
  names = sorted(_results())
  assert sorted(os.listdir(tmp_path)) == [f"{name}.png" for name in names]
  # One line per image written.
  assert len(re.findall(r"^wrote .*\.png", done.stdout, re.M)) == len(names), done.stdout
  for name in names:
    assert _png_size(tmp_path / f"{name}.png") == (700, 350), name
  # Before: a results file could change and its committed image stay as it was. The same
  # matplotlib draws the same bytes; another may draw others (figures.py's MATPLOTLIB).
  import matplotlib  # pylint: disable=import-outside-toplevel
  with open(SCRIPT) as f:
    drew = re.search(r'^MATPLOTLIB = "([^"]+)"', f.read(), re.M).group(1)
  if matplotlib.__version__ != drew:
    warnings.warn(f"docs/images were drawn with matplotlib {drew}, this is "
                  f"{matplotlib.__version__}: their bytes are not compared")
    return
  stale = [name for name in names if (tmp_path / f"{name}.png").read_bytes()
           != pathlib.Path(IMAGES, f"{name}.png").read_bytes()]
  assert not stale, (f"docs/images is not what its results files draw: {stale}. "
                     "Run python benchmarks/figures.py")


def test_every_image_a_page_shows_is_one_the_command_makes():
  shown = list(_shown_images())
  made = {f"{name}.png" for name in _results()}
  assert len(shown) >= len(made)  # Each figure is shown at least once, on the overview.
  for page, link, path in shown:
    assert os.path.dirname(path) == IMAGES, f"{page}: {link} is not in docs/images"
    assert os.path.basename(path) in made, f"{page}: {link} is made by no results file"
    assert os.path.isfile(path), f"{page}: {link} is missing: run python benchmarks/figures.py"


def test_docs_images_holds_only_what_the_command_makes():
  made = sorted(f"{name}.png" for name in _results())
  assert sorted(os.listdir(IMAGES)) == made  # No stale image, none missing.
  for name in made:
    assert _png_size(os.path.join(IMAGES, name)) == (700, 350), name


@pytest.mark.parametrize("name", sorted(_results()))
def test_each_figure_is_the_numbers_of_its_section_with_their_date_machine_and_command(name):
  figure = _results()[name]
  for key in ("title", "date", "machine", "command", "source"):
    assert isinstance(figure.get(key), str) and figure[key].strip(), f"{name}: {key}"
  datetime.date.fromisoformat(figure["date"])
  assert "2-core development VM" in figure["machine"], figure["machine"]
  page, section = _source(figure["source"])
  where = f"{os.path.relpath(page, helpers.REPO)}, {figure['source']!r}"
  assert figure["date"] in section, f"{name}: {figure['date']} is not in {where}"
  assert f"`benchmarks/results/{name}.json`" in section, f"{name}: {where} does not name its file"
  # Shown in its own section, or on the overview beside a link to that section.
  shown_there = re.search(r"\((?:\.\./)?images/" + re.escape(name) + r"\.png\)", section)
  assert shown_there or _overview_shows_beside_a_link(name, page, figure["source"]), (
      f"{name}: shown neither in {where} nor on the overview beside a link to it")
  # Copied from the page, not measured again: every number drawn is written in its section.
  missing = [value for value in _numbers(figure) if not _written(value, section)]
  assert not missing, f"{name}: not in {where}: {missing}"


def test_the_overview_links_every_benchmarks_page_and_repeats_none_of_its_numbers():
  # A number is written once, on the page of its area; the overview shows the figures
  # and links there. No line with a digit is on both.
  with open(OVERVIEW) as f:
    overview = f.read()
  numbered = {line.strip() for line in overview.splitlines() if re.search(r"\d", line)}
  pages = _benchmark_pages()[1:]
  assert pages
  for page in pages:
    assert f"(benchmarks/{os.path.basename(page)})" in overview, f"no link to {page}"
    with open(page) as f:
      repeated = numbered & {line.strip() for line in f}
    assert not repeated, f"docs/benchmarks.md repeats {os.path.relpath(page, DOCS)}: {repeated}"


def _bad(tmp_path, edit):
  """A copy of compare.json changed by `edit`, alone in a results folder."""
  with open(os.path.join(RESULTS, "compare.json")) as f:
    figure = json.load(f)
  edit(figure)
  (tmp_path / "results").mkdir()
  path = tmp_path / "results" / "compare.json"
  path.write_text(json.dumps(figure))
  return path


def _no_command(figure):
  del figure["command"]


def _kind(figure):
  figure["panels"][0]["kind"] = "pie"


def _short(figure):
  figure["panels"][1]["series"][0]["values"].pop()


def _date(figure):
  figure["date"] = "24 November 2026"


def _null(figure):
  figure["panels"][0]["series"][0]["values"][0] = None


def _bare_marks(figure):
  figure["panels"][0]["marks"] = [0.9] * 5


def _bars_on_a_log_scale(figure):
  figure["panels"][0]["x_scale"] = "log"


@pytest.mark.parametrize("edit, match", [
    pytest.param(_no_command, r"`command` must be a non-empty string.*Received: command=None",
                 id="no command"),
    pytest.param(_kind, r"`panels\[0\]\.kind` must be 'bars' or 'lines'\. Received: 'pie'",
                 id="unknown kind"),
    pytest.param(_short, r"`panels\[1\]\.series\[0\]\.values` must be a list of 5 numbers or "
                 r"nulls\. Received: \[2\.4, 2\.9, 2\.4, 6\.8\]", id="a value short"),
    pytest.param(_date, r"`date` must be YYYY-MM-DD\. Received: '24 November 2026'", id="date"),
    pytest.param(_null, r"`panels\[0\]\.series\[0\]\.values\[0\]` is null without a low and "
                 r"a high", id="null without a range"),
    pytest.param(_bare_marks, r"`panels\[0\]\.marks` must be \{'label': \.\.\., 'values': "
                 r"\[\.\.\.\]\}\. Received: \[0\.9", id="marks without labels"),
    pytest.param(_bars_on_a_log_scale, r"`panels\[0\]\.x_scale` is for a lines panel; bars "
                 r"have no x axis\. Received: 'log'", id="x_scale on bars"),
])
def test_a_results_file_it_cannot_draw_is_an_error_naming_it(tmp_path, edit, match):
  path = _bad(tmp_path, edit)
  done = helpers.run(helpers.python(SCRIPT, f"--results_dir={path.parent}",
                                    f"--out_dir={tmp_path / 'images'}"), timeout=60)
  assert done.returncode != 0
  assert re.search(re.escape(str(path)) + ": " + match, done.stdout), done.stdout[-2000:]
  assert not (tmp_path / "images").exists()  # Every file is checked before any is drawn.
