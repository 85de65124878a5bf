"""Opaque, signed page cursors (seed 002: "Pass nextCursor back as cursor").

A cursor is base64url (no padding) of where the last page ended and an
HMAC-SHA256 over that position and the collection it belongs to, under the
server's own key. The client cannot read meaning into it, and a cursor it
forged, altered or took from another collection is refused (invalid params),
so paging can never be steered to a position staal did not hand out.
Pure computation: the key is given, never read here.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac

from staal.protocol.errors import BadValue

MAC_SIZE = 32
# A cursor is short: a record id (bounded by the id's own limit) and a MAC.
MAX_CURSOR = 1024


class CursorSigner:
    def __init__(self, key: bytes) -> None:
        if len(key) < 32:
            raise BadValue("a cursor key is at least 32 bytes")
        self._key = key

    def _mac(self, collection: str, position: str) -> bytes:
        message = collection.encode() + b"\0" + position.encode()
        return hmac.new(self._key, message, hashlib.sha256).digest()

    def make(self, collection: str, position: str) -> str:
        """The cursor that continues `collection` after `position`."""
        return self._encode(position.encode() + self._mac(collection, position))

    @staticmethod
    def _encode(raw: bytes) -> str:
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()

    def read(self, collection: str, cursor: str) -> str | None:
        """The position a cursor this server made for `collection` holds;
        None for anything else (forged, altered, truncated, another
        collection's, or not a cursor at all)."""
        if not isinstance(cursor, str) or not cursor or len(cursor) > MAX_CURSOR:
            return None
        try:
            # validate: a character outside base64url is an altered cursor,
            # never one silently skipped.
            raw = base64.b64decode(cursor + "=" * (-len(cursor) % 4), altchars=b"-_",
                                   validate=True)
        except (binascii.Error, ValueError):
            return None
        if len(raw) < MAC_SIZE or self._encode(raw) != cursor:
            # Only the one encoding this server writes: a last character
            # changed in its unused bits decodes alike, and is still altered.
            return None
        body, mac = raw[:-MAC_SIZE], raw[-MAC_SIZE:]
        try:
            position = body.decode()
        except UnicodeDecodeError:
            return None
        if not hmac.compare_digest(mac, self._mac(collection, position)):
            return None
        return position
