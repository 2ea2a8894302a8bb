"""Where notebook containers run, behind one small interface (`base.Engine`): this host's
Docker engine (`docker`), and the container settings no notebook may have (`escapes`)."""
