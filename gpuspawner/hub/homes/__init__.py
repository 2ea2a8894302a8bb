"""Homes on a swarm whose nodes keep their own: which node holds each user's home, kept for
the broker (`nodes`; the rules are `core.homes`'s, the records `records.homes`'s), and the
REST API that moves one (`api`)."""
