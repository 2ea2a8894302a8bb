"""The hub's GPU pages and the lease: the pool for admins and scripts, as a page and as JSON,
with a stop that tells the user why, and each user's stop notices as JSON (`pages`, from
`report`; the pages' templates in `templates/`), and each server's own lease, for the
JupyterLab inside it (`lease`)."""
