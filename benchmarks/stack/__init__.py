"""The pieces of the simulator's week replayed on the real stack (issue 48): a real hub,
proxy and dockerd on simulated GPUs, driven by the trace the simulator reads.

`train` (the training script a replayed job runs) and `lost_work` (its journal read into
what giving way cost), `jobs` (a trace's run as the jobs API's body), `timescale` (every
duration of the hub's config and of the trace divided by one factor, and what cannot be),
`script` (what one person does and when, pure) and `person` (that person as a client with
their own token), `load` (the simulated GPUs' load file, the way `gpuspawner simulate`
writes it). The traces are read with `simulation.trace` and `simulation.jobs`.
"""
