"""completion/complete (issue 29): suggestions for a prompt's argument or a
resource template's parameter, prefix-matched, at most 100, `hasMore` set.

From the operator's listed values (an argument's, or a collection's for its
`{id}`), answered at once; or, for an argument naming a collection (and a
collection template's `{id}` without listed values), from its record
ids: a `RecordIds` for the application, which reads them with one run of
the collection's `list` entry, journaled as any record read, and shapes its
page with `ids_completion`. A prompt the caller does not see, an argument it
does not take, or a template this server does not serve is invalid params.
"""

from __future__ import annotations

from staal.protocol.mcp.jsonrpc import RpcError
from staal.protocol.mcp.resources import MAX_ID, RecordIds, ResourceCatalogue
from staal.protocol.prompts.catalogue import PromptCatalogue, invalid, unknown_prompt
from staal.records.record import Json

MAX_VALUES = 100
MAX_PREFIX = MAX_ID
_HIGHEST = chr(0x10FFFF)


def values_completion(values: list[str] | tuple[str, ...], prefix: str) -> dict[str, Json]:
    """The operator's values that start with `prefix`, in their order."""
    found = [v for v in values if v.startswith(prefix)]
    return {"values": list(found[:MAX_VALUES]), "total": len(found),
            "hasMore": len(found) > MAX_VALUES}


def ids_completion(ids: list[str], prefix: str, more_records: bool) -> dict[str, Json]:
    """A page of record ids, in id order, read from just before `prefix`
    (`list_after`): the ones that start with it. Matching ids are
    contiguous in id order, so more can follow only if the page was cut
    while still in them (or before them)."""
    found = [i for i in ids if i.startswith(prefix)]
    cut_inside = more_records and (not ids or ids[-1] < prefix or ids[-1].startswith(prefix))
    completion: dict[str, Json] = {"values": list(found[:MAX_VALUES]),
                                   "hasMore": len(found) > MAX_VALUES or cut_inside}
    if not cut_inside:
        completion["total"] = len(found)
    return completion


def list_after(prefix: str) -> str | None:
    """Where a `list` run starts so that the first id after it is the first
    one at or past `prefix` (ids are compared by code point, as a page's
    order is checked): the prefix with its last character one less and then
    the highest character to the longest id's length, so no id shorter than
    that falls between it and the prefix."""
    if not prefix:
        return None
    head, last = prefix[:-1], ord(prefix[-1])
    if last == 0:
        return head or None
    return head + chr(last - 1) + _HIGHEST * (MAX_ID - len(prefix) + 1)


class Completer:
    def __init__(self, prompts: PromptCatalogue, resources: ResourceCatalogue | None) -> None:
        self.prompts = prompts
        self.resources = resources

    def complete(self, params: dict[str, Json]) -> dict[str, Json] | RpcError | RecordIds:
        ref, argument = params.get("ref"), params.get("argument")
        if not isinstance(ref, dict) or not isinstance(ref.get("type"), str):
            return invalid("completion/complete needs ref: {type: ref/prompt, name} or "
                           "{type: ref/resource, uri}")
        if (not isinstance(argument, dict) or not isinstance(argument.get("name"), str)
                or not isinstance(argument.get("value"), str)):
            return invalid("completion/complete needs argument: {name, value}, both strings")
        name, prefix = argument["name"], argument["value"]
        if len(prefix) > MAX_PREFIX:
            return invalid(f"argument.value is at most {MAX_PREFIX} characters")
        if ref["type"] == "ref/prompt":
            found = self.for_prompt(ref.get("name"), name, prefix)
        elif ref["type"] == "ref/resource":
            found = self.for_template(ref.get("uri"), name, prefix)
        else:
            return invalid(f"ref.type {str(ref['type'])[:40]!r} is neither ref/prompt nor "
                           "ref/resource")
        return found if isinstance(found, (RpcError, RecordIds)) else {"completion": found}

    def for_prompt(self, prompt_name: Json, name: str,
                   prefix: str) -> dict[str, Json] | RpcError | RecordIds:
        prompt = self.prompts.prompts.get(prompt_name) if isinstance(prompt_name, str) else None
        if prompt is None:
            return unknown_prompt(prompt_name)
        argument = next((a for a in prompt.arguments if a.name == name), None)
        if argument is None:
            return invalid(f"prompt {prompt.name!r} has no argument {name[:80]!r}",
                           argument=name[:80])
        if argument.collection is not None:
            return self.record_ids(argument.collection, prefix)
        return values_completion(argument.values, prefix)

    def for_template(self, uri: Json, name: str,
                     prefix: str) -> dict[str, Json] | RpcError | RecordIds:
        templates = [] if self.resources is None else self.resources.templates()
        template = next((t for t in templates if t["uriTemplate"] == uri), None)
        if template is None:
            shown = uri[:200] if isinstance(uri, str) else uri
            return invalid(f"ref.uri {shown!r} is not a resource template this server serves")
        assert self.resources is not None and isinstance(uri, str)
        if f"{{{name}}}" not in uri and not _in_query(uri, name):
            return invalid(f"resource template {uri[:200]!r} has no parameter {name[:80]!r}",
                           argument=name[:80])
        collection = self.resources.collections.get(uri[len(self.resources.base) + 1:]
                                                    .split("/")[0])
        if name != "id" or collection is None:
            return values_completion((), prefix)
        return self.record_ids(collection.segment, prefix)

    def record_ids(self, segment: str, prefix: str) -> dict[str, Json] | RecordIds:
        """A collection's ids: those the operator listed, or a read of them."""
        collection = None if self.resources is None else self.resources.collections.get(segment)
        if collection is not None and collection.ids:
            return values_completion(collection.ids, prefix)
        return RecordIds(segment, prefix)


def _in_query(uri: str, name: str) -> bool:
    start = uri.find("{?")
    return start >= 0 and name in uri[start + 2:uri.find("}", start)].split(",")
