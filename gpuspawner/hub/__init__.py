"""Inside the hub: the spawner (`server`), the one module that touches JupyterHub's
internals (`attach`), the parts built from the config (`parts`), jupyterhub-idle-culler as
a service (`culler`), and the rooms, one capability each with its API and pages:
`engines`, `web`, `spawn`, `jobs`, `calendar`, `homes`, `reclaim`, `watch`, `books`,
`line` and `base`. A room reads only the rooms below it (docs/architecture.md, "The hub's
rooms"; import-linter checks it)."""
