"""The conformance suite's test_multiple_content_types: text, an image and
an embedded resource, in that order."""

from media import red_pixel_png

from staal import EmbeddedResource, Image


def main() -> list:
    return ["Multiple content types test:", Image(red_pixel_png(), "image/png"),
            EmbeddedResource("test://mixed-content-resource", text='{"test":"data","value":123}',
                             mime_type="application/json")]
