"""Which versions of a library a use of its private code was tested with."""

import logging
import re
from typing import Optional, Tuple

logger = logging.getLogger("tfdist")

Version = Tuple[int, int]


def parse(version: str) -> Version:
  """(major, minor) of a version string such as '2.21.0' or '3.15.0.dev1'."""
  major, minor = (int(re.match(r"\d*", part).group() or 0) for part in version.split(".")[:2])
  return major, minor


def untested_reason(library: str, installed: Optional[Version], tested: Tuple[Version, Version],
                    what: str, issue: str) -> Optional[str]:
  """Why `what` is not applied to `installed` (outside `tested`, inclusive), or None."""
  if installed is None:
    return f"{library} is not installed"
  if tested[0] <= installed <= tested[1]:
    return None
  low, high = (".".join(map(str, v)) for v in tested)
  return (f"tfdist's {what} ({issue}) is tested with {library} {low} to {high} and is not "
          f"applied to {library} {installed[0]}.{installed[1]}")


def check(library: str, installed: Optional[Version], tested: Tuple[Version, Version],
          what: str, issue: str) -> bool:
  """Whether `what` may run; if not, logs why once per call (a warning)."""
  reason = untested_reason(library, installed, tested, what, issue)
  if reason and installed is not None:
    logger.warning(reason)
  return reason is None
