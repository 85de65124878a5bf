"""`server.store` (issue 15): "file" (the default) or {"postgres": {"dsn":
{"env": NAME}, "lease_s": SECONDS}}; anything else is refused at load with
its key path, and a DSN written in place is never repeated in the message."""

from __future__ import annotations

from pathlib import Path

import pytest

from staal.manifest.check import load_manifest
from staal.manifest.model import DEFAULT_LEASE_MS, PostgresStore, SecretRef
from tests.helpers.manifests import broken, seed_example, write_manifest, write_programs


@pytest.fixture
def here(tmp_path: Path) -> Path:
    write_programs(tmp_path)
    return tmp_path


def with_store(here: Path, store: object) -> Path:
    data = seed_example()
    data["server"]["store"] = store
    return write_manifest(here, data)


def test_the_file_store_is_the_default_and_may_be_named(here: Path) -> None:
    assert load_manifest(write_manifest(here, seed_example())).server.store is None
    assert load_manifest(with_store(here, "file")).server.store is None


def test_a_postgres_store_names_the_variable_holding_its_dsn(here: Path) -> None:
    loaded = load_manifest(with_store(here, {"postgres": {"dsn": {"env": "LEDGER_DSN"}}}))
    assert loaded.server.store == PostgresStore(SecretRef("LEDGER_DSN"))
    assert loaded.server.store.lease_ms == DEFAULT_LEASE_MS == 15_000


@pytest.mark.parametrize(("seconds", "ms"), [(3, 3000), (6, 6000), (7.5, 7500), (3600, 3_600_000)])
def test_a_postgres_store_takes_its_lease_in_seconds(here: Path, seconds: float, ms: int) -> None:
    loaded = load_manifest(with_store(here, {"postgres": {"dsn": {"env": "LEDGER_DSN"},
                                                          "lease_s": seconds}}))
    assert loaded.server.store == PostgresStore(SecretRef("LEDGER_DSN"), ms)


@pytest.mark.parametrize("seconds", [0, -15, 2.9, 3601, 1e9, "15", "15s", True, None, [15]])
def test_a_lease_out_of_range_or_not_a_number_is_refused_naming_its_key_path(
        here: Path, seconds: object) -> None:
    store = {"postgres": {"dsn": {"env": "LEDGER_DSN"}, "lease_s": seconds}}
    problems = broken(here, lambda d: d["server"].__setitem__("store", store))
    assert len(problems) == 1, problems
    assert problems[0].startswith("server.store.postgres.lease_s: expected a number of seconds "
                                  "from 3 to 3600"), problems


@pytest.mark.parametrize(("store", "where"), [
    ("sqlite", "server.store: "),
    ({"postgres": {}}, "server.store.postgres.dsn: is required"),
    ({"postgres": {"dsn": {"env": "not a name"}}}, "server.store.postgres.dsn.env: "),
    ({"postgres": {"dsn": {"env": "X"}, "pool": 3}}, "server.store.postgres"),
    ({"postgres": {"dsn": {"env": "X"}}, "file": {}}, "server.store: "),
])
def test_any_other_store_is_refused_naming_its_key_path(here: Path, store: object,
                                                        where: str) -> None:
    problems = broken(here, lambda d: d["server"].__setitem__("store", store))
    assert len(problems) == 1 and problems[0].startswith(where), problems


@pytest.mark.parametrize("store", [
    "host=db.internal user=staal password=s3cret-in-place",
    {"postgres": {"dsn": "host=db.internal user=staal password=s3cret-in-place"}},
])
def test_a_dsn_written_in_place_is_refused_without_being_repeated(here: Path,
                                                                  store: object) -> None:
    problems = broken(here, lambda d: d["server"].__setitem__("store", store))
    assert len(problems) == 1 and problems[0].startswith("server.store")
    assert "s3cret-in-place" not in problems[0] and "db.internal" not in problems[0]
