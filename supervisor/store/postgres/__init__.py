"""The PostgreSQL store (the only package here that imports psycopg)."""
