"""A model of the PostgreSQL store's lease protocol (issue 27 item 4): lease
acquire, renew and expiry, fencing tokens, takeover and settling in place,
with 3 instances, pauses, kills, database restarts and clock skews, explored
over every interleaving to a stated bound. docs/lease-model.md says what it
covers, what it does not, and how each step maps to the code."""
