"""The documentation cannot drift: the site builds strictly, its examples run, every public name has a docstring."""

import importlib
import importlib.util
import inspect
import io
import os
import re
import subprocess
import sys

import pytest

import helpers

DOCS = os.path.join(helpers.REPO, "docs")
# A Python block that does not run in the suite says why on the line before it:
# `<!-- not run: needs a Ray cluster -->`.
NOT_RUN = re.compile(r"<!-- not run: (\S.*?) -->\s*$")
_FENCE = re.compile(r"^```([^\n]*)\n(.*?)^```[ \t]*$", re.M | re.S)


def _pages():
  """README.md and every page of the site, as paths relative to the checkout."""
  pages = ["README.md"]
  for folder, _, files in os.walk(DOCS):
    pages += [os.path.relpath(os.path.join(folder, f), helpers.REPO) for f in files
              if f.endswith(".md")]
  return sorted(pages)


def _python_blocks(page):
  """(line, info string, code, reason not run or None) for each Python block of `page`."""
  with open(os.path.join(helpers.REPO, page)) as f:
    text = f.read()
  blocks = []
  for match in _FENCE.finditer(text):
    if "python" not in match.group(1):
      continue
    before = text[:match.start()].rstrip("\n").rpartition("\n")[2]
    reason = NOT_RUN.search(before)
    blocks.append((text.count("\n", 0, match.start()) + 1, match.group(1), match.group(2),
                   reason.group(1) if reason else None))
  return blocks


_RUNNABLE_PAGES = [page for page in _pages() if any(
    reason is None for _, _, _, reason in _python_blocks(page))]


def test_every_python_block_runs_or_says_why_not():
  blocks = {page: _python_blocks(page) for page in _pages()}
  # A block fenced `.notest` still says why.
  unmarked = [f"{page}:{line}" for page, found in blocks.items()
              for line, info, _, reason in found if reason is None and "notest" in info]
  assert not unmarked, unmarked
  # Most blocks run; the few that cannot (a Ray cluster, a remote address) say so.
  assert len(_RUNNABLE_PAGES) >= 15, _RUNNABLE_PAGES


@pytest.mark.slow
@pytest.mark.parametrize("page", _RUNNABLE_PAGES)
def test_the_python_blocks_of_a_page_run_as_a_reader_runs_them(page, tmp_path):
  # One fresh process per page, its blocks in order, in an empty folder: what a
  # reader who pastes them gets, without the test suite's set-up.
  script = "\n".join(code for _, _, code, reason in _python_blocks(page) if reason is None)
  (tmp_path / "page.py").write_text(script)
  done = helpers.run([sys.executable, str(tmp_path / "page.py")], timeout=300,
                     cwd=str(tmp_path))
  assert done.returncode == 0, f"{page}:\n{done.stdout[-3000:]}"


# A docs page stays short enough to read: a longer one is split or shortened. (The site's
# changelog page includes CHANGELOG.md, which keeps the history whole, outside docs/.)
MAX_PAGE_LINES = 300


def test_no_docs_page_is_over_300_lines():
  long = []
  for page in _pages():
    if not page.startswith("docs" + os.sep):
      continue
    with open(os.path.join(helpers.REPO, page)) as f:
      count = sum(1 for _ in f)
    if count > MAX_PAGE_LINES:
      long.append(f"{page}: {count} lines")
  assert not long, f"pages over {MAX_PAGE_LINES} lines (split or shorten them): {long}"


@pytest.fixture(scope="module")
def site(tmp_path_factory):
  """The built site's folder: built once, strictly (a broken link, a reference mkdocstrings
  cannot resolve, or a docstring griffe cannot parse fails the build)."""
  folder = tmp_path_factory.mktemp("site")
  done = helpers.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir",
                      str(folder)], timeout=300)
  assert done.returncode == 0, done.stdout[-3000:]
  return folder


@pytest.mark.slow
def test_the_site_builds_strictly(site):
  reference = (site / "reference" / "strategies" / "index.html").read_text()
  assert "make_strategy" in reference and "ClusterSpec" in (
      site / "reference" / "cluster" / "index.html").read_text()
  launch = (site / "reference" / "launch" / "index.html").read_text()
  # The reference renders the public surface only: no implementation module.
  assert 'id="tfdist.launch.LocalLauncher"' in launch
  assert not re.search(r'id="tfdist\.launch\.(supervision|local|ray_placement)\b', launch)


# Run once the page has loaded, in the test's own copy of each page it serves: which images
# did not load, and how many there are, written where --dump-dom shows them.
_IMAGE_CHECK = (b"<script>addEventListener('load', () => {const bad = [...document.images]"
                b".filter(i => !i.complete || i.naturalWidth === 0).map(i => i.src);"
                b"document.body.dataset.brokenImages = JSON.stringify(bad);"
                b"document.body.dataset.images = document.images.length;});</script>")
# A page, an image-heavy page and a guide, opened as a reader opens them.
BROWSED = {"index.html": 0, "benchmarks/index.html": 13,
           "guides/choosing-a-strategy/index.html": 1}


def _serve(folder):
  """An HTTP server of `folder` on loopback that adds _IMAGE_CHECK to each page; it runs
  in a thread until shut down."""
  import functools
  import http.server
  import threading

  class Handler(http.server.SimpleHTTPRequestHandler):
    def send_head(self):
      path = self.translate_path(self.path)
      if os.path.isdir(path):
        path = os.path.join(path, "index.html")
      if not path.endswith(".html") or not os.path.isfile(path):
        return super().send_head()
      with open(path, "rb") as f:
        body = f.read().replace(b"</body>", _IMAGE_CHECK + b"</body>")
      self.send_response(200)
      self.send_header("Content-Type", "text/html; charset=utf-8")
      self.send_header("Content-Length", str(len(body)))
      self.end_headers()
      return io.BytesIO(body)

    def log_message(self, *args):
      pass

  server = http.server.ThreadingHTTPServer(
      ("127.0.0.1", 0), functools.partial(Handler, directory=str(folder)))
  threading.Thread(target=server.serve_forever, daemon=True).start()
  return server


@pytest.mark.slow
def test_pages_open_in_a_browser_with_every_image_loaded_and_no_raw_directive(site, tmp_path):
  import shutil
  browser = shutil.which("chromium") or shutil.which("chromium-browser")
  if browser is None:
    reason = "no Chromium: `make browser` installs Debian's (needs root and apt-get)"
    if os.environ.get("CI"):  # CI installs it (`make test`): a skip there would hide the test.
      pytest.fail(reason)
    pytest.skip(reason)
  server = _serve(site)
  try:
    for page, images in BROWSED.items():
      # --no-sandbox: CI runs as root, where Chromium's sandbox will not start.
      # --disable-dev-shm-usage: a container's /dev/shm can be too small for a page.
      done = helpers.run([browser, "--headless", "--no-sandbox", "--disable-gpu",
                          "--disable-dev-shm-usage",
                          f"--user-data-dir={tmp_path / 'profile'}",
                          "--virtual-time-budget=10000", "--dump-dom",
                          f"http://127.0.0.1:{server.server_address[1]}/{page}"], timeout=120)
      assert done.returncode == 0, done.stdout[-3000:]
      dom = done.stdout
      attributes = dict(re.findall(r'data-(broken-images|images)="([^"]*)"', dom))
      assert set(attributes) == {"broken-images", "images"}, (page, dom[-2000:])  # It ran.
      assert attributes["broken-images"] == "[]", (page, attributes)
      assert int(attributes["images"]) >= images, (page, attributes)
      # A directive the site did not render (mkdocstrings' `::: module`) shows as text.
      # Anywhere in the text, not only where an element starts: code blocks aside.
      text = re.sub(r"<(code|pre|script|style)\b.*?</\1>", "", dom, flags=re.S)
      assert not re.search(r"(^|>|\n)[^<\n]*?:::\s+[\w.]+", text), page
      assert "<article" in dom, page
  finally:
    server.shutdown()
    server.server_close()


@pytest.mark.slow
def test_the_multi_worker_quickstart_trains_two_workers_in_sync(tmp_path):
  page = open(os.path.join(DOCS, "get-started", "quickstart-multi-worker.md")).read()
  script = re.search(r'```\{\.python \.notest title="train.py"\}\n(.*?)```', page, re.S).group(1)
  (tmp_path / "train.py").write_text(script)
  done = helpers.run(helpers.tfdist_cli("launch", "--workers=2", "--timeout=240", "--",
                                        sys.executable, str(tmp_path / "train.py")),
                     timeout=300)
  assert done.returncode == 0, done.stdout[-3000:]
  losses = re.findall(r"\[worker:(\d)\] replicas: 2 loss: ([\d.]+)", done.stdout)
  assert sorted(w for w, _ in losses) == ["0", "1"], done.stdout[-2000:]
  assert losses[0][1] == losses[1][1]  # One model, trained in sync.


def _documented_modules():
  """Every module a reference page renders (`::: module` lines)."""
  names = []
  for page in sorted(os.listdir(os.path.join(DOCS, "reference"))):
    with open(os.path.join(DOCS, "reference", page)) as f:
      names += re.findall(r"^::: (tfdist[\w.]*)$", f.read(), re.M)
  return names


def _public(module):
  """(name, object) of the public names `module` defines (its __all__, else its own defs)."""
  if hasattr(module, "__all__"):
    return [(name, getattr(module, name)) for name in module.__all__]
  return [(name, value) for name, value in vars(module).items() if not name.startswith("_")
          and (inspect.isfunction(value) or inspect.isclass(value))
          and getattr(value, "__module__", None) == module.__name__]


def test_every_public_name_in_the_reference_has_a_docstring():
  missing = []
  modules = _documented_modules()
  assert "tfdist.strategies" in modules and "tfdist.training.loop" in modules
  for dotted in modules:
    try:
      module = importlib.import_module(dotted)
    except ImportError:  # A function documented by its path (tfdist._keras_support.use_...).
      module_name, _, attribute = dotted.rpartition(".")
      value = getattr(importlib.import_module(module_name), attribute)
      missing += [] if inspect.getdoc(value) else [dotted]
      continue
    if not inspect.getdoc(module):
      missing.append(dotted)
    for name, value in _public(module):
      if not (inspect.isfunction(value) or inspect.isclass(value)):
        continue  # Constants are documented where they are defined.
      if not inspect.getdoc(value):
        missing.append(f"{dotted}.{name}")
      if inspect.isclass(value):
        missing += [f"{dotted}.{name}.{attr}" for attr, member in vars(value).items()
                    if not attr.startswith("_") and inspect.isfunction(member)
                    and not inspect.getdoc(member)]
  assert not missing, f"public names without a docstring: {sorted(set(missing))}"


# --- public names only ---------------------------------------------------------
# What users read and copy (the docs, the recipes, the notebooks, the benchmarks)
# uses tfdist's public surfaces: `tfdist`, its packages, and what each lists in
# `__all__`. Anything else is an implementation module that may change.

_USER_FACING = ("README.md", "docs", "strategies", "notebooks", "benchmarks", "launch")
# Pages that keep history: the names they mention were public once.
_HISTORY = ("CHANGELOG.md", os.path.join("docs", "changelog.md"))
# Pages for contributors name implementation modules: those names need only resolve.
_CONTRIBUTORS = tuple(os.path.join("docs", page) for page in
                      ("architecture.md", "known_issues.md", "known-issues-clusters.md",
                       "measuring.md"))
_IMPORT = re.compile(r"^\s*(?:from\s+(tfdist[\w.]*)\s+import\s+\(?([\w\s,]+?)\)?\s*(?:#.*)?$"
                     r"|import\s+(tfdist[\w.]*))", re.M)
# The lab (tfdist._lab) is private, and its own readers use it: the benchmark scripts
# time with its harness and models, notebook 06 teaches with its all-reduce family.
# There its names need only resolve.
_LAB = "tfdist._lab"
_LAB_READERS = ("benchmarks", os.path.join("notebooks", "06_all_reduce_algorithms.ipynb"))
_DOTTED = re.compile(r"(?<![\w./-])tfdist(?:\.[A-Za-z_]\w*)+")


def _user_facing_files():
  for entry in _USER_FACING:
    path = os.path.join(helpers.REPO, entry)
    walk = [(os.path.dirname(path), [], [entry])] if os.path.isfile(path) else os.walk(path)
    for folder, _, files in walk:
      for name in files:
        if name.endswith((".md", ".py", ".ipynb")):
          full = os.path.join(folder, name)
          if os.path.relpath(full, helpers.REPO) not in _HISTORY:
            yield os.path.relpath(full, helpers.REPO)


def _text(path):
  with open(os.path.join(helpers.REPO, path)) as f:
    text = f.read()
  if path.endswith(".ipynb"):  # The cells' sources, as a reader sees them.
    import json  # pylint: disable=import-outside-toplevel
    text = "\n".join("".join(cell["source"]) for cell in json.loads(text)["cells"])
  return text


def _public_lookup(dotted):
  """None if `dotted` is reached through public surfaces only, else why not."""
  parts = dotted.split(".")
  value = importlib.import_module("tfdist")
  for depth, part in enumerate(parts[1:], start=1):
    here = ".".join(parts[:depth])
    if inspect.ismodule(value):
      # A package says what is public in __all__; a public module without one
      # follows Python's convention (no leading underscore).
      exported = getattr(value, "__all__", None)
      if exported is None and part.startswith("_"):
        return f"{part!r} is private to {here}"
      if exported is not None and part not in exported:
        return f"{part!r} is not in {here}.__all__"
      try:
        value = getattr(value, part)
      except AttributeError:
        value = importlib.import_module(f"{value.__name__}.{part}")
    else:
      if not hasattr(value, part):
        return f"{here} has no attribute {part!r}"
      value = getattr(value, part)
  return None


def _resolve(dotted):
  """The object `dotted` names, importing modules on the way; AttributeError if none."""
  parts = dotted.split(".")
  value = importlib.import_module(parts[0])
  for depth, part in enumerate(parts[1:], start=2):
    try:
      value = getattr(value, part)
    except AttributeError:
      if not inspect.ismodule(value):
        raise
      try:
        value = importlib.import_module(".".join(parts[:depth]))
      except ImportError:
        raise AttributeError(f"{'.'.join(parts[:depth - 1])} has no {part!r}") from None
  return value


def _problem(path, name):
  """Why `name`, written in `path`, is not what a reader may use; None if it is."""
  try:
    value = _resolve(name)
  except AttributeError as e:
    return f"does not resolve ({e})"
  if path.startswith(_CONTRIBUTORS):
    return None
  if (name == _LAB or name.startswith(_LAB + ".")) and path.startswith(_LAB_READERS):
    return None
  if path.startswith(os.path.join("docs", "reference")):
    # A name `tfdist`, or the package above its private module, exports, rendered where
    # it lives (`tfdist.training._local_sgd.LocalSGD` is `tfdist.training.LocalSGD`).
    parts, leaf = name.split("."), name.rpartition(".")[2]
    public = ".".join(parts[:next((i for i, p in enumerate(parts) if p.startswith("_")),
                                  len(parts))])
    for package in {"tfdist", public}:
      try:
        if getattr(importlib.import_module(package), leaf, None) is value:
          return None
      except ImportError:
        pass
  return _public_lookup(name)


def _names_used(text):
  """Every tfdist name `text` imports or writes out, dotted."""
  names = set()
  for match in _IMPORT.finditer(text):
    module, imported, plain = match.groups()
    if plain:
      names.add(plain)
    else:
      names.update(f"{module}.{name.split(' as ')[0].strip()}" for name in imported.split(",")
                   if name.strip())
  names.update(name.rstrip(".") for name in _DOTTED.findall(text))
  # File names (`tfdist.md`, `tfdist.log`) are not Python names.
  return {name for name in names if name != "tfdist" and
          name.rpartition(".")[2] not in ("md", "py", "log", "json", "yaml", "html")}


def test_what_users_read_uses_public_names_that_resolve():
  problems = []
  files = list(_user_facing_files())
  assert any(f.startswith("notebooks") for f in files) and "README.md" in files
  for path in files:
    for name in sorted(_names_used(_text(path))):
      why = _problem(path, name)
      if why:
        problems.append(f"{path}: {name}: {why}")
  assert not problems, "\n".join(problems)


# --- retired names --------------------------------------------------------------
# Modules that were renamed or folded into others; their old names mislead.
# (tests/test_package.py checks that they are gone, so tests/ may name them.)
RETIRED = ("checkpointing.", "gradient_compression", "keras3_workarounds", "scaling_analysis",
           "tfdist.datasets")
_CODE = ("tfdist", "strategies", "benchmarks")


def _code_files():
  for top in _CODE:
    for folder, _, files in os.walk(os.path.join(helpers.REPO, top)):
      yield from (os.path.relpath(os.path.join(folder, f), helpers.REPO) for f in files
                  if f.endswith(".py"))


def test_no_retired_module_path_in_the_docs_docstrings_or_comments():
  files = [*_code_files(), *_user_facing_files()]
  retired = re.compile(r"\b(" + "|".join(re.escape(name) for name in RETIRED) + r")")
  problems = [f"{path}: {match.group(1)}" for path in files
              for match in retired.finditer(_text(path))]
  # Every dotted tfdist name in code, docstrings and comments still resolves
  # (mains are found, not imported: each defines its flags on import).
  for path in _code_files():
    for name in sorted(_names_used(_text(path))):
      if name.startswith("tfdist.cli."):
        if importlib.util.find_spec(name.rpartition(".")[0] if name.count(".") > 2 else name) is None:
          problems.append(f"{path}: {name}: no such main")
        continue
      try:
        _resolve(name)
      except AttributeError as e:
        problems.append(f"{path}: {name}: {e}")
  assert not problems, "\n".join(problems)


def test_the_docs_give_the_cluster_environments_in_the_order_detect_asks_them():
  # The order lives in code (tfdist/cluster/__init__.py registers them); this
  # page is the one place the docs spell it out.
  from tfdist import cluster  # pylint: disable=import-outside-toplevel
  with open(os.path.join(DOCS, "guides", "cluster-specs.md")) as f:
    section = f.read().partition("## Where a cluster comes from")[2].partition("\n## ")[0]
  listed = []
  for item in re.findall(r"^\d+\. ((?:`\w+`(?:, | and )?)+):", section, re.M):
    listed += re.findall(r"`(\w+)`", item)
  assert listed == cluster.available_environments()
