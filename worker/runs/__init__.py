"""One run inside a worker: its order, the run context, the broker, journaling and spans."""
