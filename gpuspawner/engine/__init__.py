"""Where notebook containers run, behind one small interface (`base.Engine`): this host's
Docker engine (`docker`), a Docker Swarm across GPU servers (`swarm`, its service specs in
`swarmspec`), and the container settings no notebook may have (`escapes`)."""
