"""The kill-point crash harness (DESIGN.md section 7; issue 6, issue 10).

For every kill point, the real server (or its worker) kills itself with
SIGKILL right after that step is durable, during a refund call made through
the official Python SDK against the fake payment service; one more cell
SIGKILLs the supervisor from outside while the service holds the refund.
The server is then started again and the call repeated. Each cell states as
data, and checks against what happened: what the first call's client saw
(the answer, or the transport closing because the server is gone), the
recovery both servers logged (seed 000 section 7's rule for the step), the
GET and POST requests the service received and the refunds it made, the
ledger's invariants, that the quota matches what was spent, that each
journal ends once, and the answer the repeated call gets (seed 000 section
5's once table).

    python -m tests.crash --report > docs/crash-matrix.md
"""
