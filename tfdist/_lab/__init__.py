"""The measurement lab: tfdist against raw TensorFlow, side by side in one run. Private.

- `harness`: interleaved variants, `interleaved_ratio`, `fit` timers;
- `models`: the models the benchmarks time;
- `overhead`: tfdist strategies against raw `tf.distribute` ones;
- `allreduce`: one all-reduce timed per way of sending it, and TCP's yardstick;
- `collectives`: the collective ops in a traced step, and their bytes;
- `all_reduce_family`: all-to-all, master-worker, tree, round-robin, butterfly
  and ring, counted round by round and run with TensorFlow's sends and
  receives (notebook 06's teaching code).

`tfdist.advice` times its ways and workers with `harness`, `models`,
`allreduce` and `collectives`; nothing here imports the product back.
Nothing here asserts a speed; `tfdist bench`, `tfdist scale` and the scripts in
`benchmarks/` print and save ratios. Not in the API reference: any of it may
change.
"""
