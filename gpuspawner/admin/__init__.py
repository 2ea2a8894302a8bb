"""The `gpuspawner` command for the admin of a GPU server: doctor, status, cleanup.

It reads the hub's config and Docker directly, never the hub process, so it
works while the hub is down.
"""
