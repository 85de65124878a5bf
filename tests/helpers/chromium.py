"""Headless Chromium for the console's tests, installed by the test command
itself when it is missing (Debian's package, with apt-get, as root:
`tests/helpers/apt.py`), so the README's two commands stay the whole set-up and no
step lives only in CI.

The browser is driven from its command line: `--dump-dom` prints the DOM
after the page loaded, `--screenshot` writes a PNG. Each run gets its own
profile directory, so parallel runs and a browser left over never share one.
"""

from __future__ import annotations

import struct
import subprocess
import tempfile
import zlib
from pathlib import Path

from tests.helpers.apt import ensure, exists

CHROMIUM = Path("/usr/bin/chromium")
BROWSE_TIMEOUT_S = 60


def chromium() -> Path:
    """The browser's path, installed with apt-get first if it is missing."""
    return ensure("chromium", exists(CHROMIUM))


def _browse(browser: Path, *args: str) -> subprocess.CompletedProcess[str]:
    with tempfile.TemporaryDirectory(prefix="staal-chromium-") as profile:
        done = subprocess.run(
            [str(browser), "--headless", "--no-sandbox", "--disable-gpu",
             "--disable-dev-shm-usage", "--no-first-run", "--hide-scrollbars",
             f"--user-data-dir={profile}", *args],
            capture_output=True, text=True, timeout=BROWSE_TIMEOUT_S, check=False)
    assert done.returncode == 0, f"chromium {args} failed:\n{done.stderr[-3000:]}"
    return done


def dump_dom(browser: Path, url: str) -> str:
    """The page's DOM, serialized after it loaded, as the browser built it."""
    return _browse(browser, "--dump-dom", url).stdout


def screenshot(browser: Path, url: str, path: Path, size: tuple[int, int]) -> Path:
    _browse(browser, f"--screenshot={path}", f"--window-size={size[0]},{size[1]}", url)
    assert path.exists(), f"chromium wrote no screenshot at {path}"
    return path


if __name__ == "__main__":
    print(chromium())


def png_pixels(path: Path, enough: int) -> tuple[int, int, set[bytes]]:
    """A PNG's width, height and distinct pixel values (8-bit RGB or RGBA,
    as Chromium writes them), decoded with the standard library from the top
    down until `enough` values are seen (decoding it all in Python is slow)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    chunks, at = {}, 8
    while at < len(data):
        length = struct.unpack(">I", data[at:at + 4])[0]
        kind = data[at + 4:at + 8]
        chunks[kind] = chunks.get(kind, b"") + data[at + 8:at + 8 + length]
        at += 12 + length
    width, height, depth, colour = struct.unpack(">IIBB", chunks[b"IHDR"][:10])
    assert depth == 8 and colour in (2, 6), f"unexpected PNG format: depth {depth}, colour {colour}"
    size = 3 if colour == 2 else 4
    raw = zlib.decompress(chunks[b"IDAT"])
    stride = width * size
    previous = bytearray(stride)
    colours: set[bytes] = set()
    for row in range(height):
        start = row * (stride + 1)
        line = _unfilter(raw[start], bytearray(raw[start + 1:start + 1 + stride]), previous, size)
        colours.update(bytes(line[i:i + size]) for i in range(0, stride, size * 7))
        previous = line
        if len(colours) >= enough:
            break
    return width, height, colours


def _unfilter(kind: int, line: bytearray, previous: bytearray, size: int) -> bytearray:
    for i in range(len(line)):
        left = line[i - size] if i >= size else 0
        up = previous[i]
        corner = previous[i - size] if i >= size else 0
        if kind == 1:
            line[i] = (line[i] + left) & 255
        elif kind == 2:
            line[i] = (line[i] + up) & 255
        elif kind == 3:
            line[i] = (line[i] + (left + up) // 2) & 255
        elif kind == 4:
            p = left + up - corner
            pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
            line[i] = (line[i] + (left if pa <= pb and pa <= pc else up if pb <= pc else corner)) & 255
    return line
