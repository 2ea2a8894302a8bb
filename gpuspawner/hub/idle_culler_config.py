# jupyterhub-idle-culler config (--config): each server's own group idle timeout.
from gpuspawner.core.culling import idle_arbiter

c = get_config()  # noqa: F821  (provided by the culler)
c.IdleCuller.cull_arbiter_hook = idle_arbiter
