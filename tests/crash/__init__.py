"""The kill-point crash harness (DESIGN.md section 7; issue 6).

For every kill point, the real server (or its worker) kills itself with
SIGKILL right after that step is durable, during a refund call made through
the official Python SDK against the fake payment service; the server is then
started again and the call repeated. Each cell checks the recovery rule of
its step (seed 000 section 7), that the refund happened exactly once at the
service, the ledger's invariants, that the quota matches what was spent, and
the answer the repeated call gets (seed 000 section 5's once table).

    python -m tests.crash --report     # the matrix, as docs/crash-matrix.md holds it
"""
