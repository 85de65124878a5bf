"""Notifications a client listens for, sans I/O: 2026-07-28's
subscriptions/listen (SEP-2575), and what staal honours of it, the tasks
extension's `notifications/tasks` (SEP-2663)."""
