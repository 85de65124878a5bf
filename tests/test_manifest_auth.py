"""The manifest's `auth` and `callers` sections and a tool's alternative
grant sets (`profiles`): what loads, and each problem named by its key path."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from staal.manifest import CredentialConfig
from staal.manifest_check import check
from tests.manifests import STRIPE_GRANT, broken, problems_of, seed_example, write_programs

ISSUER = "https://auth.example.com/"
SMALLER = {**STRIPE_GRANT, "each": {"amount": "5.00", "currency": "USD"}}


@pytest.fixture
def here(tmp_path: Path) -> Path:
    write_programs(tmp_path)
    return tmp_path


def with_auth(data: dict[str, Any], **auth: Any) -> dict[str, Any]:
    data["auth"] = {"issuer": ISSUER, "audience": "https://mcp.example.com/mcp", **auth}
    return data


def with_callers(data: dict[str, Any]) -> dict[str, Any]:
    with_auth(data)
    data["tools"][0]["profiles"] = {"support": {"pay": SMALLER}}
    data["callers"] = [
        {"name": "support", "when": {"scope": "support"},
         "tools": {"refund_order": {"grants": "support",
                                    "quota": {"window": "1h", "calls": 5}}},
         "rate": {"calls": 10, "window": "1m"}},
        {"name": "ops", "when": {"client_id": "ops-bot"}, "tools": {"refund_order": {}}},
    ]
    return data


def test_auth_loads_with_its_defaults(here):
    data = with_auth(seed_example())
    del data["auth"]["audience"]
    data["server"]["http"] = {"public_url": "https://mcp.example.com/mcp"}
    auth = check(data, here / "manifest.json").auth
    assert auth is not None
    assert (auth.issuer, auth.audience, auth.jwks_url) == (ISSUER, "https://mcp.example.com/mcp", None)
    assert auth.algorithms == ("RS256", "ES256") and auth.required_scopes == ()
    assert auth.credential == CredentialConfig("bearer")


def test_the_audience_is_required_without_a_public_url(here):
    data = with_auth(seed_example())
    del data["auth"]["audience"]
    assert problems_of(here, data) == [
        "auth.audience: is required when server.http.public_url is not set: the audience is "
        "always checked"]


@pytest.mark.parametrize(("algorithm", "why"), [
    ("none", "an unsigned token is never accepted"),
    ("HS256", "an HMAC algorithm (a shared secret)"),
    ("XS1", "not a signature algorithm staal checks")])
def test_an_algorithm_that_is_not_an_asymmetric_signature_is_refused(here, algorithm, why):
    (problem,) = broken(here, lambda d: with_auth(d, algorithms=["RS256", algorithm]))
    assert problem.startswith(f'auth.algorithms[1]: "{algorithm}": {why}')


@pytest.mark.parametrize(("auth", "expected"), [
    ({"issuer": "http://auth.example.com"}, "auth.issuer: \"http://auth.example.com\": an issuer is "
                                           "an https URL (http only on a loopback host)"),
    ({"credential": {"presence": "kerberos"}},
     'auth.credential.presence: expected "bearer" or "provider", not "kerberos"'),
    ({"credential": {"presence": "bearer", "headers": ["x-a"]}},
     'auth.credential.headers: belongs to presence "provider"; a bearer token needs nothing more'),
    ({"credential": {"presence": "provider"}},
     'auth.credential.program: is required with presence "provider"'),
    ({"audiense": "x"}, "auth.audiense: unknown key"),
])
def test_a_bad_auth_section_names_the_key(here, auth, expected):
    (problem,) = broken(here, lambda d: d.update(auth={"issuer": ISSUER,
                                                       "audience": "https://mcp.example.com/mcp",
                                                       **auth}))
    assert problem.startswith(expected)


def test_a_provider_credential_names_its_program_entry_and_headers(here):
    (here / "verify.py").write_text("def verify(head): return None\n")
    data = with_auth(seed_example(), credential={"presence": "provider", "program": "verify.py",
                                                 "headers": ["X-Attestation"]})
    credential = check(data, here / "manifest.json").auth.credential
    assert credential.presence == "provider" and credential.program == here / "verify.py"
    assert (credential.entry, credential.headers) == ("verify", ("x-attestation",))


def test_callers_and_grant_sets_load(here):
    manifest = check(with_callers(seed_example()), here / "manifest.json")
    support, ops = manifest.callers
    assert support.when == ("scope", "support") and ops.when == ("client_id", "ops-bot")
    assert support.tools["refund_order"].grants == "support"
    assert support.tools["refund_order"].quota.calls == 5
    assert support.rate.calls == 10 and support.rate.window.ms == 60_000
    tool = manifest.tools[0]
    assert tool.grant_set("support")["pay"].each.minor == 500
    assert tool.grant_set(None)["pay"].each.minor == 5000


@pytest.mark.parametrize(("change", "expected"), [
    (lambda d: d.pop("auth"), "callers: needs the auth section"),
    (lambda d: d["callers"][0]["tools"].update(nope={}),
     "callers[0].tools.nope: 'nope' is not a tool of this manifest"),
    (lambda d: d["callers"][0]["tools"]["refund_order"].update(grants="admin"),
     "callers[0].tools.refund_order.grants: \"admin\" is not one of tool 'refund_order''s grant sets"),
    (lambda d: d["callers"][1].update(when={"scope": "a b"}),
     "callers[1].when.scope: \"a b\" is not one scope"),
    (lambda d: d["callers"][1].update(when={"sub": "a", "scope": "b"}),
     "callers[1].when: expected an object with one key"),
    (lambda d: d["callers"][1].update(name="support"),
     "callers[1].name: 'support' is already a caller profile's name"),
    (lambda d: d["callers"][0].update(rate={"calls": 0, "window": "1m"}), "callers[0].rate.calls:"),
    (lambda d: d["tools"][0]["profiles"].update(other={"pay": {"cap": "net.http.get",
                                                                 "only": ["https://a.example/*"]}}),
     "tools[0].profiles.other: a grant set names the same parameters and capabilities"),
])
def test_a_bad_callers_section_names_the_key(here, change, expected):
    data = with_callers(seed_example())
    change(data)
    problems = problems_of(here, data)
    assert len(problems) == 1 and problems[0].startswith(expected), problems


def test_the_example_manifest_with_callers_loads():
    from staal.manifest import load_manifest

    root = Path(__file__).resolve().parent.parent
    manifest = load_manifest(root / "examples" / "manifest.callers.json")
    assert manifest.auth.audience == manifest.server.http.public_url
    support, finance = manifest.callers
    assert support.tools["refund_order"].grants == "support"
    assert manifest.tool("refund_order").grant_set("support")["pay"].each.minor == 2000
    assert finance.when == ("client_id", "finance-agent")


def test_a_grant_set_under_a_money_quota_must_bound_its_spend_in_the_quotas_currency(here):
    data = with_callers(seed_example())
    unbounded = {key: value for key, value in SMALLER.items() if key != "uses"}
    data["tools"][0]["profiles"]["support"]["pay"] = unbounded
    (problem,) = problems_of(here, data)
    assert problem.startswith("tools[0].profiles.support: grant 'pay' has no max and no each with uses")


def test_a_grant_sets_secrets_are_handed_to_its_runs_and_kept_from_every_worker(here, monkeypatch):
    from staal.supervisor.zygote import secret_names, worker_environment

    data = with_callers(seed_example())
    support = data["tools"][0]["profiles"]["support"]["pay"]
    support["needs"] = {**support["needs"], "key": {"env": "STRIPE_SUPPORT_KEY"}}
    monkeypatch.setenv("STRIPE_SUPPORT_KEY", "sk_support_zq4")
    manifest = check(data, here / "manifest.json")
    names = secret_names(manifest)
    assert names["refund_order"] == ("STRIPE_SECRET_KEY",)
    assert names["refund_order:support"] == ("STRIPE_SUPPORT_KEY",)
    assert "sk_support_zq4" not in worker_environment(manifest).values()
