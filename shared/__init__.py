"""staal: the shared core both the supervisor and the workers agree on.

Also the program-facing API: operator programs import `Money` and `fail`
from here, and the content parts of a result that is not JSON (`Image`,
`Audio`, `EmbeddedResource`, `Text`).
"""

from __future__ import annotations

from staal.content import Audio, EmbeddedResource, Image, Text
from staal.money import Money
from staal.program import ActionFailed, Json, fail

__version__ = "0.1.0"
# What a journal's header records: a run resumes only under the same runtime.
RUNTIME = f"staal {__version__}"

__all__ = [
    "RUNTIME", "ActionFailed", "Audio", "EmbeddedResource", "Image", "Json", "Money", "Text",
    "__version__", "fail",
]
