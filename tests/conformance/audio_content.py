"""The conformance suite's test_audio_content: a tool that returns a recording."""

from media import silence_wav

from staal import Audio


def main() -> Audio:
    return Audio(silence_wav(), "audio/wav")
