"""tfdist's output policy: library code logs to the `tfdist` logger; only mains print.

Until the application configures logging itself, the `tfdist` logger shows its
INFO lines on stdout (as Keras prints its progress) and its warnings and
errors on stderr, each as the bare message. Once the root logger has a handler
(`logging.basicConfig`, absl's), tfdist's records go there instead, and
nothing is shown twice. To quieten or redirect tfdist:

>>> import logging
>>> logging.getLogger("tfdist").setLevel(logging.WARNING)  # only warnings and errors
>>> tfdist.output.set_verbosity("error")                    # the same, by name

`tfdist`'s commands take `--verbosity` for the same.
"""

import logging
import sys

LOGGER_NAME = "tfdist"
logger = logging.getLogger(LOGGER_NAME)

LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING,
          "error": logging.ERROR}


class _DefaultHandler(logging.Handler):
  """Shows a record as its message until the application has a logging setup of its own."""

  always = False  # Set by mains (`show_on_console`): shown whatever the root's handlers.

  def emit(self, record):
    if not self.always and logging.getLogger().handlers:
      return  # The application's handlers get it through propagation.
    # Looked up at each record: pytest and notebooks replace the streams.
    stream = sys.stdout if record.levelno < logging.WARNING else sys.stderr
    try:
      stream.write(self.format(record) + "\n")
      stream.flush()
    except Exception:  # pylint: disable=broad-except
      self.handleError(record)


def set_verbosity(level: str) -> None:
  """Shows tfdist's records from `level` up: 'debug', 'info', 'warning' or 'error'."""
  if level not in LEVELS:
    raise ValueError(f"`verbosity` must be one of {sorted(LEVELS, key=LEVELS.get)}. "
                     f"Received: {level!r}")
  logger.setLevel(LEVELS[level])


def show_on_console(level: int = logging.INFO) -> None:
  """For mains: tfdist's records from `level` up go to the console as bare messages.

  Whatever handlers the root logger has (absl's `app.run` installs its own),
  and only there: INFO on stdout, warnings and errors on stderr.
  """
  _handler.always = True
  logger.propagate = False
  logger.setLevel(level)


def _install() -> "_DefaultHandler":
  for handler in logger.handlers:
    if isinstance(handler, _DefaultHandler):
      return handler
  handler = _DefaultHandler()
  logger.addHandler(handler)
  if logger.level == logging.NOTSET:
    logger.setLevel(logging.INFO)
  return handler


_handler = _install()
