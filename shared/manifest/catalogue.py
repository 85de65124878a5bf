"""The capability catalogue of version 1 (DESIGN.md section 4).

One row per capability: the class a program annotates a parameter with, what
a grant of it may say, and the facts tool annotations are derived from. The
manifest check, the runtime's broker and the protocol's annotations all read
this table, so a capability is described exactly once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

SECRET = "secret"


@dataclass(frozen=True, slots=True)
class CapSpec:
    name: str
    class_name: str
    writes: bool
    open_world: bool
    money: bool
    keys: frozenset[str]
    required: frozenset[str] = frozenset()
    # For a composite capability: the name of each lower capability it acts
    # through, mapped to that capability's name, or to SECRET for a secret.
    needs: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def reads_only(self) -> bool:
        return not self.writes

    def allowed_keys(self) -> list[str]:
        return sorted(self.keys | {"cap"})


def _spec(
    name: str,
    class_name: str,
    *,
    writes: bool,
    open_world: bool,
    keys: str,
    required: str = "",
    money: bool = False,
    needs: dict[str, str] | None = None,
) -> CapSpec:
    return CapSpec(
        name=name,
        class_name=class_name,
        writes=writes,
        open_world=open_world,
        money=money,
        keys=frozenset(keys.split()),
        required=frozenset(required.split()),
        needs=MappingProxyType(dict(needs or {})),
    )


CATALOGUE: Mapping[str, CapSpec] = MappingProxyType(
    {
        spec.name: spec
        for spec in (
            _spec("net.http.get", "HttpGet", writes=False, open_world=True,
                  keys="uses only", required="only"),
            _spec("net.http.post", "HttpPost", writes=True, open_world=True,
                  keys="uses only idempotency_key", required="only"),
            _spec("payments.stripe.refund", "StripeRefund", writes=True, open_world=True,
                  money=True, keys="uses each max needs base_url", required="needs",
                  needs={"get": "net.http.get", "post": "net.http.post", "key": SECRET}),
            _spec("model.complete", "Model", writes=False, open_world=True, keys="uses"),
            _spec("db.sqlite.read", "SqliteRead", writes=False, open_world=False,
                  keys="uses path", required="path"),
            _spec("db.sqlite.write", "SqliteWrite", writes=True, open_world=False,
                  keys="uses path", required="path"),
            _spec("db.postgres.read", "PostgresRead", writes=False, open_world=False,
                  keys="uses dsn", required="dsn"),
            _spec("db.postgres.write", "PostgresWrite", writes=True, open_world=False,
                  keys="uses dsn", required="dsn"),
            _spec("clock.now", "Clock", writes=False, open_world=False, keys="uses"),
            _spec("random.bytes", "Random", writes=False, open_world=False, keys="uses"),
            _spec("ffi.c", "Ffi", writes=True, open_world=True, keys="library",
                  required="library"),
        )
    }
)

# A composite's `post` need must carry idempotency keys: a payment is the one
# action whose retry must never become a second payment (seed 000 section 5).
REQUIRED_IN_NEEDS: Mapping[tuple[str, str], str] = MappingProxyType(
    {("payments.stripe.refund", "post"): "idempotency_key"}
)

MODEL_CAP = "model.complete"
