"""The long- and short-lived processes of the worker side: zygote, worker, verifier."""
