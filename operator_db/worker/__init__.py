"""The measurement worker: job claiming with leases, and the daemon loop."""
