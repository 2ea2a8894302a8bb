"""What gpuspawner writes down and reads back: the usage ledger. Beside the core (standard
library only), so both the hub and the admin tools can use it."""
