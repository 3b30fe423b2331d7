"""The all-reduce family: all-to-all, master-worker, tree, round-robin, butterfly and ring.

An algorithm is an `AllReduceSchedule`: rounds of point-to-point messages,
each a slice of one node's vector sent to another node, which adds it to its
own (reduce) or keeps it (copy). A round's messages all leave together, from
what each node held when the round began, and wait for the round before. The
schedule gives the textbook counts: rounds (`num_steps`), the bytes each node
sends and receives, the bytes of each link between two nodes.
`run_all_reduce` runs a schedule with TensorFlow: node i's vector lives on
devices[i], and each message is one tensor copied to its destination's device
(a Send/Recv pair; between the tasks of a cluster, a gRPC RecvTensor), so the
counts are what TensorFlow moves. Notebook 06 runs every algorithm on a
cluster of 8 tasks over loopback and measures each task's bytes.

For N nodes and vectors of n bytes (N a power of two for tree and butterfly,
N dividing n):

    algorithm      steps       bytes one node sends     bytes of the busiest link
    all_to_all     1           (N-1) n                  n
    master_worker  2           (N-1) n (the master)     n
    tree           2 log2 N    log2 N * n (the root)    n
    round_robin    2 (N-1)     2 (N-1)/N * n            2 n/N
    butterfly      2 log2 N    2 (N-1)/N * n            n
    ring           2 (N-1)     2 (N-1)/N * n            2 (N-1)/N * n

- all_to_all: every node sends its whole vector to every other node, and
  each adds the N-1 it receives to its own.
- master_worker: every node sends its vector to node 0, the master, which
  adds them and sends the sum back; all traffic crosses the master's link.
- tree: a binomial tree. In round k, each node 2**k * (2j+1) sends its partial
  sum to node 2**k * 2j, until node 0 holds the sum; it then comes back down
  the same tree. ceil(log2 N) rounds each way, n per message.
- round_robin: node j owns slice j of N slices. In round k = 1..N-1, node i
  sends its copy of slice (i+k) mod N to that slice's owner, which adds it:
  every node meets every other node once, in turn, as in a round-robin
  tournament. N-1 more rounds send each owner's summed slice to every node
  in the same order. The ring's steps and bytes per node, spread over
  N(N-1) links instead of N.
- butterfly: recursive halving, then recursive doubling (Rabenseifner). In
  halving round k, node i and node i XOR N/2**(k+1) each keep one half of
  the range both still reduce, and send the other half to the partner, which
  adds it; after log2 N rounds each node holds the sum of its 1/N, and log2 N
  rounds of doubling retrace the pairs to gather it everywhere. For N not a
  power of two, the nodes beyond the largest power of two first hand their
  vector to a partner and get the result back at the end: two more rounds.
- ring: N-1 rounds of reduce-scatter (node i sends one slice to node i+1,
  which adds it), then N-1 rounds of all-gather around the same ring.

Example:

    >>> from tfdist._lab import all_reduce_family as family
    >>> ring = family.all_reduce_schedule("ring", nodes=4, size=1000)
    >>> ring.num_steps, ring.bytes_sent(), ring.max_link_bytes()
    (6, [6000, 6000, 6000, 6000], 6000)
    >>> family.textbook_cost("ring", nodes=4, size=1000)
    AllReduceCost(steps=6, node_bytes=6000.0, link_bytes=6000.0, total_bytes=24000)
"""

import collections
import dataclasses
import math
from typing import Dict, List, Sequence, Tuple

ALL_REDUCE_ALGORITHMS = ("all_to_all", "master_worker", "tree", "round_robin", "butterfly",
                         "ring")


@dataclasses.dataclass(frozen=True)
class AllReduceMessage:
  """One message: elements [start, stop) of `source`'s vector, sent to `destination`."""

  source: int
  destination: int
  start: int
  stop: int
  reduce: bool  # True: the destination adds it to its own; False: it takes it.

  @property
  def elements(self) -> int:
    return self.stop - self.start


@dataclasses.dataclass(frozen=True)
class AllReduceSchedule:
  """An all-reduce algorithm for `nodes` vectors of `size` elements, round by round."""

  algorithm: str
  nodes: int
  size: int
  rounds: Tuple[Tuple[AllReduceMessage, ...], ...]

  @property
  def num_steps(self) -> int:
    """Communication rounds: each waits for the one before it."""
    return len(self.rounds)

  def bytes_sent(self, itemsize: int = 4) -> List[int]:
    """Bytes each node sends over the whole all-reduce (its link's outgoing traffic)."""
    sent = [0] * self.nodes
    for message in self.messages():
      sent[message.source] += message.elements * itemsize
    return sent

  def bytes_received(self, itemsize: int = 4) -> List[int]:
    """Bytes each node receives over the whole all-reduce (its link's incoming traffic)."""
    received = [0] * self.nodes
    for message in self.messages():
      received[message.destination] += message.elements * itemsize
    return received

  def link_bytes(self, itemsize: int = 4) -> Dict[Tuple[int, int], int]:
    """Bytes per directed link (source, destination) that carries any."""
    links = collections.Counter()
    for message in self.messages():
      links[(message.source, message.destination)] += message.elements * itemsize
    return dict(links)

  def max_link_bytes(self, itemsize: int = 4) -> int:
    """The busiest directed link's bytes."""
    return max(self.link_bytes(itemsize).values(), default=0)

  def step_bytes(self, itemsize: int = 4) -> List[int]:
    """The largest message of each round: what a round costs on its busiest link."""
    return [max((t.elements * itemsize for t in r), default=0) for r in self.rounds]

  def messages(self) -> List[AllReduceMessage]:
    """Every message, round after round."""
    return [message for messages in self.rounds for message in messages]

  def simulate(self, vectors: Sequence[Sequence[float]]) -> List[List[float]]:
    """What every node holds at the end, in plain Python (for checking a schedule)."""
    held = [list(v) for v in vectors]
    for messages in self.rounds:
      sent = [(t, held[t.source][t.start:t.stop]) for t in messages]
      for t, values in sent:
        target = held[t.destination]
        for offset, value in enumerate(values):
          target[t.start + offset] = target[t.start + offset] + value if t.reduce else value
    return held


@dataclasses.dataclass(frozen=True)
class AllReduceCost:
  """The textbook figures of one all-reduce (bytes, for vectors of `n` bytes on N nodes)."""

  steps: int  # communication rounds
  node_bytes: float  # what the busiest node sends
  link_bytes: float  # what the busiest directed link carries
  total_bytes: float  # what all links carry together


def textbook_cost(algorithm: str, nodes: int, size: int, itemsize: int = 4) -> AllReduceCost:
  """The formulas for `nodes` vectors of `size` elements.

  `steps` and `total_bytes` hold for every N and size; `node_bytes` and
  `link_bytes` are exact where N divides the size (for butterfly, the largest
  power of two <= N does) and within one element per slice elsewhere.

  Args:
    algorithm: one of ALL_REDUCE_ALGORITHMS.
    nodes: N, the vectors reduced (>= 1).
    size: elements of each vector.
    itemsize: bytes per element (4 for float32).

  Returns:
    AllReduceCost(steps, node_bytes, link_bytes, total_bytes): see the module's table.

  Raises:
    ValueError: an unknown algorithm, nodes < 1 or size < 0.

  Example:

      >>> textbook_cost("master_worker", nodes=8, size=1000)
      AllReduceCost(steps=2, node_bytes=28000.0, link_bytes=4000.0, total_bytes=56000)
  """
  _check(algorithm, nodes, size)
  n, N = size * itemsize, nodes
  if N == 1:
    return AllReduceCost(0, 0.0, 0.0, 0)
  log = math.ceil(math.log2(N))
  if algorithm == "all_to_all":
    return AllReduceCost(1, float((N - 1) * n), float(n), N * (N - 1) * n)
  if algorithm == "master_worker":
    return AllReduceCost(2, float((N - 1) * n), float(n), 2 * (N - 1) * n)
  if algorithm == "tree":
    # Node 0 receives from log2 N children and sends back to each; a link is used once.
    return AllReduceCost(2 * log, float(log * n), float(n), 2 * (N - 1) * n)
  if algorithm == "round_robin":
    return AllReduceCost(2 * (N - 1), 2 * (N - 1) / N * n, 2 * n / N, 2 * (N - 1) * n)
  if algorithm == "butterfly":
    power = 2**int(math.log2(N))
    extra = N - power
    # Partners at distance N/2 swap n/2 each way twice; a folded node sends n once.
    return AllReduceCost(2 * int(math.log2(power)) + (2 if extra else 0),
                         2 * (power - 1) / power * n + (n if extra else 0), float(n),
                         2 * (power - 1) * n + 2 * extra * n)
  return AllReduceCost(2 * (N - 1), 2 * (N - 1) / N * n, 2 * (N - 1) / N * n, 2 * (N - 1) * n)


def _check(algorithm, nodes, size):
  if algorithm not in ALL_REDUCE_ALGORITHMS:
    raise ValueError(f"`algorithm` must be one of {list(ALL_REDUCE_ALGORITHMS)}. "
                     f"Received: algorithm={algorithm!r}")
  if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 1:
    raise ValueError(f"`nodes` must be an integer >= 1. Received: nodes={nodes!r}")
  if isinstance(size, bool) or not isinstance(size, int) or size < 0:
    raise ValueError(f"`size` must be an integer >= 0 (elements per vector). "
                     f"Received: size={size!r}")


def _slices(start: int, stop: int, parts: int) -> List[Tuple[int, int]]:
  """[start, stop) in `parts` consecutive near-equal ranges, larger ones first."""
  base, extra = divmod(stop - start, parts)
  ranges = []
  for i in range(parts):
    end = start + base + (1 if i < extra else 0)
    ranges.append((start, end))
    start = end
  return ranges


def all_reduce_schedule(algorithm: str, nodes: int, size: int) -> AllReduceSchedule:
  """The rounds of `algorithm` for `nodes` vectors of `size` elements.

  Args:
    algorithm: one of ALL_REDUCE_ALGORITHMS.
    nodes: N, the vectors reduced (>= 1).
    size: elements of each vector (any, not only multiples of N).

  Returns:
    The AllReduceSchedule. Empty messages are left out but empty rounds are
    kept (a vector shorter than N leaves slices empty), so `num_steps` is the
    algorithm's whatever the size.

  Raises:
    ValueError: an unknown algorithm, nodes < 1 or size < 0.

  Example:

      >>> all_reduce_schedule("master_worker", nodes=3, size=2).rounds[0]
      (AllReduceMessage(source=1, destination=0, start=0, stop=2, reduce=True),
       AllReduceMessage(source=2, destination=0, start=0, stop=2, reduce=True))
  """
  _check(algorithm, nodes, size)
  build = {"all_to_all": _all_to_all, "master_worker": _master_worker, "tree": _tree,
           "round_robin": _round_robin, "butterfly": _butterfly, "ring": _ring}[algorithm]
  rounds = [] if nodes == 1 else build(nodes, size)
  kept = tuple(tuple(t for t in r if t.stop > t.start) for r in rounds)
  return AllReduceSchedule(algorithm, nodes, size, kept)


def _all_to_all(N, n):
  # Each node keeps its own vector and adds the N-1 it receives: a reduce per receipt.
  return [[AllReduceMessage(i, j, 0, n, True) for i in range(N) for j in range(N) if i != j]]


def _master_worker(N, n):
  return [[AllReduceMessage(i, 0, 0, n, True) for i in range(1, N)],
          [AllReduceMessage(0, i, 0, n, False) for i in range(1, N)]]


def _tree(N, n):
  up, distance = [], 1
  while distance < N:
    up.append([AllReduceMessage(i, i - distance, 0, n, True)
               for i in range(distance, N, 2 * distance)])
    distance *= 2
  down = [[AllReduceMessage(t.destination, t.source, 0, n, False) for t in r]
          for r in reversed(up)]
  return up + down


def _round_robin(N, n):
  owned = _slices(0, n, N)
  scatter = [[AllReduceMessage(i, (i + k) % N, *owned[(i + k) % N], True) for i in range(N)]
             for k in range(1, N)]
  gather = [[AllReduceMessage(i, (i + k) % N, *owned[i], False) for i in range(N)]
            for k in range(1, N)]
  return scatter + gather


def _ring(N, n):
  chunks = _slices(0, n, N)
  scatter = [[AllReduceMessage(i, (i + 1) % N, *chunks[(i - k) % N], True) for i in range(N)]
             for k in range(N - 1)]
  # After the scatter node i holds the sum of chunk i+1; pass it on around the ring.
  gather = [[AllReduceMessage(i, (i + 1) % N, *chunks[(i + 1 - k) % N], False) for i in range(N)]
            for k in range(N - 1)]
  return scatter + gather


def _butterfly(N, n):
  power = 2**int(math.log2(N))
  extra = N - power
  rounds = []
  if extra:  # Fold the nodes beyond the power of two into their partners.
    rounds.append([AllReduceMessage(power + j, j, 0, n, True) for j in range(extra)])
  ranges = [(0, n)] * power
  halving = []  # (distance, what each node reduced before that round)
  distance = power // 2
  while distance >= 1:
    messages, kept = [], list(ranges)
    for i in range(power):
      partner = i ^ distance
      low, high = _slices(*ranges[i], 2)
      # The lower index keeps the lower half; each sends the half its partner keeps.
      keep, send = (low, high) if i < partner else (high, low)
      messages.append(AllReduceMessage(i, partner, *send, True))
      kept[i] = keep
    halving.append((distance, ranges))
    rounds.append(messages)
    ranges = kept
    distance //= 2
  for distance, before in reversed(halving):
    # Doubling: give back the range the partner gave away in that halving round.
    rounds.append([AllReduceMessage(i, i ^ distance, *ranges[i], False) for i in range(power)])
    ranges = before
  if extra:
    rounds.append([AllReduceMessage(j, power + j, 0, n, False) for j in range(extra)])
  return rounds


def run_all_reduce(schedule: AllReduceSchedule, vectors: Sequence,
                   devices: Sequence[str]) -> List:
  """Runs `schedule` with TensorFlow: node i's vector on devices[i], each message one copy.

  Each node's vector is kept in pieces cut at every boundary the schedule
  uses; a message concatenates its pieces on the source's device, is copied
  to the destination's device (a Send/Recv pair; over gRPC between the tasks
  of a cluster) and is added or written there. A round's
  messages wait for the round before (control dependencies), so the rounds
  run as the schedule counts them. Call it inside `tf.function` to run it as
  one graph, or eagerly.

  Args:
    schedule: an `all_reduce_schedule`.
    vectors: N tensors of shape (size,), one per node.
    devices: N device names, one per node (they may repeat: logical CPUs
      stand in for machines; a device that holds two nodes copies nothing
      between them).

  Returns:
    N tensors, node i's result on devices[i]; each equals the sum of `vectors`.

  Raises:
    ValueError: as many vectors and devices as the schedule's nodes are needed.

  Example:

      >>> import tensorflow as tf
      >>> schedule = all_reduce_schedule("butterfly", nodes=2, size=3)
      >>> summed = run_all_reduce(schedule, [tf.ones(3), 2 * tf.ones(3)], ["/cpu:0", "/cpu:1"])
      >>> summed[1].numpy()
      array([3., 3., 3.], dtype=float32)
  """
  import tensorflow as tf  # pylint: disable=import-outside-toplevel  The schedules need none.

  if len(vectors) != schedule.nodes or len(devices) != schedule.nodes:
    raise ValueError(
        f"run_all_reduce needs one vector and one device per node: the schedule has {schedule.nodes} "
        f"node(s). Pass {schedule.nodes} of each. Received: {len(vectors)} vector(s), "
        f"{len(devices)} device(s)")
  cuts = sorted({0, schedule.size} | {b for t in schedule.messages() for b in (t.start, t.stop)})
  widths = [b - a for a, b in zip(cuts, cuts[1:])]
  index = {start: i for i, start in enumerate(cuts[:-1])}
  pieces, dtypes = [], []
  for vector, device in zip(vectors, devices):
    with tf.device(device):
      vector = tf.reshape(tf.convert_to_tensor(vector), [-1])
      pieces.append(list(tf.split(vector, widths)) if widths else [])
      dtypes.append(vector.dtype)
  previous = []
  for messages in schedule.rounds:
    received = []
    # A round starts when the round before has arrived everywhere: the schedule's
    # steps, even where the data would let a node run ahead (round-robin's sends).
    with tf.control_dependencies(previous):
      for t in messages:
        first, last = index[t.start], index.get(t.stop, len(widths))
        with tf.device(devices[t.source]):
          span = pieces[t.source][first:last]
          message = span[0] if len(span) == 1 else tf.concat(span, 0)
        with tf.device(devices[t.destination]):
          received.append((t, first, last, tf.identity(message)))
    for t, first, last, message in received:
      with tf.device(devices[t.destination]):
        parts = [message] if last - first == 1 else tf.split(message, widths[first:last])
        for offset, part in enumerate(parts):
          held = pieces[t.destination][first + offset]
          pieces[t.destination][first + offset] = held + part if t.reduce else part
    previous = [message for *_, message in received]
  results = []
  for node, device in enumerate(devices):
    with tf.device(device):
      results.append(tf.concat(pieces[node], 0) if len(pieces[node]) > 1
                     else tf.identity(pieces[node][0]) if pieces[node]
                     else tf.zeros([0], dtypes[node]))
  return results
