"""The conformance suite's test_embedded_resource: a tool that returns a
resource's text, embedded under its URI."""

from staal import EmbeddedResource


def main() -> EmbeddedResource:
    return EmbeddedResource("test://embedded-resource", text="This is an embedded resource content.",
                            mime_type="text/plain")
