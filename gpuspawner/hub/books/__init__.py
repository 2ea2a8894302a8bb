"""The books: the broker that owns a hub's GPU books (`broker`) and the parts that are its
alone: releases on the engine's word (`removals`), what the machine says each tick
(`machine`), the books rebuilt at hub start (`recovery`), a start's refusal in its user's
words (`refusals`), GPU-hour budgets against the ledger (`budgets`), and what it asks of
the jobs' board (`jobs_part`). The parts kept in other rooms (the line, the calendar's
windows, the homes' nodes) sit below it; every room that reads or changes the books sits
above it."""
