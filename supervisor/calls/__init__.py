"""A tool call's seven steps, from the request to the answer, and what it holds while in flight."""
