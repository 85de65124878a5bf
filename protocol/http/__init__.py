"""The Streamable HTTP transport, sans I/O: heads and bodies in, answers out; bearer
challenges, credentials, step-up and readiness answers."""
