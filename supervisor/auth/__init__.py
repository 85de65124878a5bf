"""Who is asking: bearer tokens, the provider verifier, principals, caller profiles, step-up."""
