"""The conformance suite's test_error_handling: a tool that always fails."""

from staal import fail


def main() -> dict:
    fail("validation", "This tool intentionally returns an error for testing")
