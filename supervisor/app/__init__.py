"""The server's process as a whole: its command line, start-up, the composition root, the lock and the log."""
