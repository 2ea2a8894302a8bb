"""Inside the hub: the spawner, the broker that owns the GPU books, the monitor and the
reclaimer, the GPU pages, the metrics and the templates."""
