"""How calls arrive: stdio, Streamable HTTP, the listeners and the connection gate, readiness."""
