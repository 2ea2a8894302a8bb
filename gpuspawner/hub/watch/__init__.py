"""Watching the machine: the monitor's look every few seconds at Docker, the GPUs and their
processes, told to the books and to its listeners (`monitor`), and the gauges and counters
read at scrape time (`metrics`)."""
