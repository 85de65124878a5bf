"""Where the ledger, journals and waiting records are durable: the file store and PostgreSQL."""
