"""What every room of the hub stands on: who may do what (`access`, gpuspawner's own
JupyterHub scopes), how the REST APIs answer (`answers`: JSON no cache keeps, ids read from
URLs), and what is counted (`counters`, the Prometheus counters and histograms, counted where
things happen)."""
