"""Placement: the arena laid out again from launch-level liveness.

`liveness` finds the tensors the launches pass between each other and when
each is live over the run; `problem` states the placement (blocks, intervals,
which pairs meet, LOAD); `fit` (best-fit decreasing) and `search` (Z3 on
neighbourhoods of the top) give the offsets; `relocate` and `phases` write
the placed plan; `check` verifies it computes what the plan it came from
computes; `placement` runs it all and `table` compares configurations.
"""
