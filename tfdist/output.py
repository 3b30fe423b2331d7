"""tfdist's output policy: library code logs to the `tfdist` logger; only mains print.

The `tfdist` logger shows its INFO lines on stdout (as Keras prints its
progress) and its warnings and errors on stderr, each as the bare message,
through a handler of its own; it does not propagate to the root logger, so
its lines look the same whatever other libraries do to logging (a module-level
`logging.warning()` anywhere installs a root handler implicitly). To quieten
or redirect tfdist:

    >>> import logging
    >>> logging.getLogger("tfdist").setLevel(logging.WARNING)  # only warnings and errors
    >>> tfdist.output.set_verbosity("error")                    # the same, by name
    >>> tfdist.output.use_root_handlers()   # to your handlers, in your format, instead

`tfdist`'s commands take `--verbosity` for the same.
"""

import logging
import sys
import time
from typing import Optional

LOGGER_NAME = "tfdist"
logger = logging.getLogger(LOGGER_NAME)

LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING,
          "error": logging.ERROR}


class _DefaultHandler(logging.Handler):
  """Shows a record as its bare message: INFO on stdout, warnings and errors on stderr."""

  def emit(self, record):
    # Looked up at each record: pytest and notebooks replace the streams.
    stream = sys.stdout if record.levelno < logging.WARNING else sys.stderr
    try:
      stream.write(self.format(record) + "\n")
      stream.flush()
    except Exception:  # pylint: disable=broad-except
      self.handleError(record)


def duration(seconds: float) -> str:
  """'23s', '14 min' or '2 h 05 min': a time as progress lines show it."""
  if seconds < 100:
    return f"{seconds:.0f}s"
  minutes = round(seconds / 60)
  if minutes < 100:
    return f"{minutes} min"
  return f"{minutes // 60} h {minutes % 60:02d} min"


def so_far(done: int, total: int, elapsed: float) -> str:
  """'5 min in all, about 5 min left' after `done` of `total` runs: the rest as long as the mean."""
  left = "" if done >= total else f", about {duration(elapsed / done * (total - done))} left"
  return f"{duration(elapsed)} in all{left}"


class Stages:
  """The stages of a long command, each as `[k/n] what...` with the time so far and left.

  The stages may differ in length: the estimate of what is left is the mean of
  those done. A main prints each line; library code logs it.

  Example:

      >>> stages = Stages(2)
      >>> stages.next("measuring on 1 worker")
      '[1/2] measuring on 1 worker...'
      >>> stages.next("measuring on 2 workers")   # 30 s later
      '[2/2] measuring on 2 workers... (30s in all, about 30s left)'
  """

  def __init__(self, total: int, start: Optional[float] = None, clock=time.monotonic):
    self.total, self.clock, self.done = total, clock, 0
    self.start = clock() if start is None else start

  def next(self, what: str) -> str:
    """The line that starts the next stage, `what`."""
    elapsed = self.clock() - self.start
    self.done += 1
    known = "" if self.done == 1 else f" ({so_far(self.done - 1, self.total, elapsed)})"
    return f"[{self.done}/{self.total}] {what}...{known}"


def set_verbosity(level: str) -> None:
  """Shows tfdist's records from `level` up: 'debug', 'info', 'warning' or 'error'."""
  if level not in LEVELS:
    raise ValueError(f"`verbosity` must be one of {sorted(LEVELS, key=LEVELS.get)}. "
                     f"Received: {level!r}")
  logger.setLevel(LEVELS[level])


def show_on_console(level: int = logging.INFO) -> None:
  """tfdist's records from `level` up go to the console as bare messages (the default).

  Mains call it with their `--verbosity`: INFO on stdout, warnings and errors
  on stderr, and not to the root logger's handlers (absl's `app.run` installs
  its own), so nothing shows twice.
  """
  if _handler not in logger.handlers:
    logger.addHandler(_handler)
  logger.propagate = False
  logger.setLevel(level)


def use_root_handlers() -> None:
  """tfdist's records go to the root logger's handlers (your logging setup) instead."""
  logger.removeHandler(_handler)
  logger.propagate = True


def _install() -> "_DefaultHandler":
  for handler in logger.handlers:
    if isinstance(handler, _DefaultHandler):
      return handler
  handler = _DefaultHandler()
  logger.addHandler(handler)
  logger.propagate = False  # Shown once, by this handler (see the module's docstring).
  if logger.level == logging.NOTSET:
    logger.setLevel(logging.INFO)
  return handler


_handler = _install()
