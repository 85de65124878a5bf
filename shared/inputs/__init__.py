"""A tool's inputs: their types as data (types.py), the check of a call's
arguments against them (arguments.py), and the JSON Schema a client sees (schema.py)."""
