"""What both processes share at run time: clocks, ids, transitions, limits, inputs."""
