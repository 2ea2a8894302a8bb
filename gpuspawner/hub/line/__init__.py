"""The waiting line: GPU starts that wait their turn (`waiting`), each one's entry (`entry`),
what people are told of it (`status`), and the hub's log of slow starts (`slow_starts`).
Its rules are `core.line`'s; it is written down in `records.line`."""
