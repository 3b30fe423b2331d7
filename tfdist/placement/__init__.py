"""Model parallelism: a model's layers, or one layer's slices, on different devices.

Two ways to split a model that data parallelism (a whole copy per device)
does not:

- `place_layers` / `PlacedSequential` (_blocks.py): consecutive blocks of
  layers per device, with optional micro-batches (GPipe's schedule);
- `SplitDense` (_split_dense.py): one fully connected layer over several
  devices, by output columns (outputs concatenated) or by input rows (partial
  products summed); `Keras3SplitDense` is the same layer for a Keras 3 model.

`bytes_crossing` (_crossing.py) counts what a placement moves between the
devices in each step, in the step's traced graph.

Example:

    >>> from tfdist import placement
    >>> model = placement.place_layers(trained_sequential, ["/cpu:0", "/cpu:1"])
    >>> wide = placement.SplitDense(4096, ["/cpu:0", "/cpu:1"], split="columns")
"""

from tfdist.placement._blocks import PlacedSequential, place_layers, split_layers
from tfdist.placement._crossing import bytes_crossing
from tfdist.placement._keras3_split_dense import Keras3SplitDense
from tfdist.placement._split_dense import SPLITS, SplitDense

__all__ = ["Keras3SplitDense", "PlacedSequential", "SPLITS", "SplitDense", "bytes_crossing",
           "place_layers", "split_layers"]

