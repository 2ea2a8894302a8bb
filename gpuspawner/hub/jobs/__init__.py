"""Jobs inside the hub: notebooks and scripts that run unattended on free GPUs, and give way.

A job is a GPU holder like a server: it is the user's named server
`job-<id>`, started by the hub (not by a person's request) when GPUs are
free and no person waits for them, with the same pool, limits, quotas,
budgets and books (its container's labels), released only on Docker's word.
Its container runs the images' `gpuspawner-job`, which runs the notebook
cell by cell (or the script) in the user's home, reports progress here, and
ends the server when the run ends. See docs/jobs.md.

`board` keeps the jobs and decides (submit, give way, end), `dispatching`
starts each waiting job that fits (one job's fault costs only that job),
`servers` keeps the names `job-<digits>` the hub's and removes the servers of
ended jobs, `launch` starts and stops their servers outside any request, `api`
is the REST API that JupyterLab, the command line and the runner speak.
"""
