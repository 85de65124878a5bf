"""`staal`, the run engine's command line, and its sub-commands."""
