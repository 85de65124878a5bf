"""The conformance suite's `greet`: answered at once, never as a task."""


def main(name: str) -> str:
    return f"Hello, {name}!"
