"""The conformance suite's test_image_content: a tool that returns an image."""

from media import red_pixel_png

from staal import Image


def main() -> Image:
    return Image(red_pixel_png(), "image/png")
