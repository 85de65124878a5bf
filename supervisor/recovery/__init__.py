"""Runs that outlived a process: recovery at start, the lease, retention, resolving and forgetting."""
