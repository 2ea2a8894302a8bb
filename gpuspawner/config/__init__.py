"""The admin's GPU settings (traitlets) and the site they describe, shared by the hub and the
admin tools."""
