"""One registry shape for strategies, launchers and cluster environments.

A `Registry` maps names to entries in the order they were registered. Each
package registers its own members explicitly, in one place and a fixed order
(`tfdist.strategies`, `tfdist.launch`, `tfdist.cluster` in their `__init__`),
never as a side effect of which module happened to be imported first.

Example:

    >>> launchers = Registry("launcher")
    >>> launchers.register("local", LocalLauncher)
    >>> launchers.get("local")
"""

from typing import Dict, Generic, List, Tuple, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
  """Named entries of one `kind`, in registration order."""

  def __init__(self, kind: str):
    self.kind = kind
    self._entries: Dict[str, T] = {}

  def register(self, name: str, entry: T) -> T:
    """Adds `entry` as `name`, after the ones registered before; returns it.

    Raises:
      ValueError: `name` is registered already.
    """
    if name in self._entries:
      raise ValueError(f"A {self.kind} named {name!r} is registered already: "
                       f"{self._entries[name]!r}. Received: {entry!r}")
    self._entries[name] = entry
    return entry

  def get(self, name: str) -> T:
    """The entry registered as `name`.

    Raises:
      ValueError: unknown name; the message lists the valid ones.
    """
    if name not in self._entries:
      raise ValueError(f"Unknown {self.kind} name. Valid names: {sorted(self._entries)}. "
                       f"Received: {name!r}")
    return self._entries[name]

  def names(self) -> List[str]:
    """The registered names, in registration order."""
    return list(self._entries)

  def items(self) -> List[Tuple[str, T]]:
    """(name, entry) pairs, in registration order."""
    return list(self._entries.items())

  def __contains__(self, name: str) -> bool:
    return name in self._entries

  def __repr__(self) -> str:
    return f"Registry({self.kind!r}: {self.names()})"
