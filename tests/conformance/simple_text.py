"""The conformance suite's test_simple_text: a tool with no arguments that
returns one text."""


def main() -> str:
    return "This is a simple text response for testing."
