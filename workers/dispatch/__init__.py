"""The dispatcher's parts: database claims and leases, the Ray task that runs a node's ranks, the
progress board, and the per-worker reaper that guarantees a killed worker leaves no runner behind."""
