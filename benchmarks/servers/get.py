"""The staal side's GET tool program: one GET of `url` through its grant,
returning the `x` the local service answers (as `ref_tools.get`)."""

from staal.caps import HttpGet


def main(url: str, service: HttpGet) -> int:
    return service.get(url).json()["x"]
