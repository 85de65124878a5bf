"""The manifest: its model, every rule checked at load, and the value types it writes."""
