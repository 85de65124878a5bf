"""What `staal-supervisor status` and the console read of a ledger, beside the servers."""
