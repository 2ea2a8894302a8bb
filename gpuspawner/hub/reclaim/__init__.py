"""Taking GPUs back from servers that no longer use them, or may no longer hold them: the
reclaimer acts on the culling policy at each of the monitor's looks (idle on its GPUs, past
`max_age`, over budget, a calendar window opening: stopped with a notice or, with parking
on, parked; `reclaimer`), and parking puts a server's GPU work in host memory and brings
it back, for the reclaimer and the jobs' board (`parking`; its rules are
`core.parking`'s)."""
