"""The staal side's no-op tool program: returns its argument."""


def main(x: int) -> int:
    return x
