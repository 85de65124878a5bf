"""What keeps a run's process to its grants: limits, the tripwire, what it inherited."""
