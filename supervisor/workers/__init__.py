"""The worker processes: the zygote that forks them, the pool and its line, how they end."""
