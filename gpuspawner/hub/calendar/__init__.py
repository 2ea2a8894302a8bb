"""The calendar: bookings and drains, kept for the broker and read by placement (`windows`;
the rules are `core.calendar`'s, the records `records.calendar`'s), and its REST API (`api`)."""
