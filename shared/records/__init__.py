"""Durable records both processes read and write: journals, ledger events, messages."""
