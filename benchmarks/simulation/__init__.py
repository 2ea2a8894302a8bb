"""The utilisation simulator behind benchmarks/utilisation.py (issue #16).

A trace of demand replayed through gpuspawner's real core on a simulated clock:
`trace` (the input format), `jobs` (training runs, and a week's as jobs), `site`
(the hub's GPUs and limits), `synthetic` (the documented team week and its
training backlog), `policies`, `model` (the minute-by-minute replay), `board`
(the hub's jobs on that clock), `measures`, `report` and `plot`. Kept apart from
the package: it is a benchmark, and it needs matplotlib, which the hub does not.
"""
