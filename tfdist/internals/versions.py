"""Which versions of a library a use of its private code was tested with."""

import dataclasses
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


@dataclasses.dataclass(frozen=True)
class Gate:
  """One use of a library's private code, and the versions it was run with.

  `tfdist.internals.gates.gates()` lists every one; `tfdist doctor` reports each on the
  installed versions.

  Attributes:
    what: what the use is, as its warning names it ("strategy watch").
    library: "TensorFlow", "tf_keras" or "Keras" (Keras 3).
    tested: the inclusive (major, minor) range it was run with.
    issue: the public issue it works around.
    without: what a user loses where it is not applied.
  """
  what: str
  library: str
  tested: Tuple[Version, Version]
  issue: str
  without: str

  def reason(self, installed: Optional[Version]) -> Optional[str]:
    """Why it is not applied to `installed`, or None."""
    return untested_reason(self.library, installed, self.tested, self.what, self.issue)

  def check(self, installed: Optional[Version]) -> bool:
    """Whether it may run on `installed`; if not, logs why (a warning)."""
    return check(self.library, installed, self.tested, self.what, self.issue)
