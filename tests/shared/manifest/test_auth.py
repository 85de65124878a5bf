"""The manifest's `auth` and `callers` sections and a tool's alternative
grant sets (`profiles`): what loads, and each problem named by its key path;
`auth.credential` bearer by default, or the operator's verifier program
(issue 14, item 3), with every problem at once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from staal.errors import ManifestError
from staal.manifest.check import check
from staal.manifest.model import CredentialConfig
from tests.helpers.manifests import STRIPE_GRANT, broken, problems_of, seed_example, write_programs

ISSUER = "https://auth.example.com/"
SMALLER = {**STRIPE_GRANT, "each": {"amount": "5.00", "currency": "USD"}}


@pytest.fixture
def here(tmp_path: Path) -> Path:
    write_programs(tmp_path)
    (tmp_path / "verify.py").write_text("def verify(request):\n    return {'subject': 'x'}\n")
    return tmp_path


PUBLIC = "https://mcp.example.com/mcp"


def with_auth(data: dict[str, Any], **auth: Any) -> dict[str, Any]:
    data["server"]["http"] = {"public_url": PUBLIC}
    data["auth"] = {"issuer": ISSUER, "audience": PUBLIC, **auth}
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
    auth = check(data, here / "manifest.json").auth
    assert auth is not None
    assert (auth.issuer, auth.audience, auth.jwks_url) == (ISSUER, "https://mcp.example.com/mcp", None)
    assert auth.algorithms == ("RS256", "ES256") and auth.required_scopes == ()
    assert auth.credential == CredentialConfig("bearer")


def test_without_a_public_url_or_an_audience_the_audience_is_left_to_the_listening_url(here):
    data = with_auth(seed_example())
    del data["auth"]["audience"], data["server"]["http"]
    assert check(data, here / "manifest.json").auth.audience is None  # serve names it


@pytest.mark.parametrize("audience", ["https://MCP.example.com/mcp/", "https://mcp.example.com:443/mcp"])
def test_an_audience_naming_the_public_url_as_written_otherwise_loads(here, audience):
    assert check(with_auth(seed_example(), audience=audience), here / "manifest.json").auth.audience \
        == audience


def test_an_audience_that_is_not_the_public_url_is_refused_naming_both_keys(here):
    data = with_auth(seed_example(), audience="https://staal.test/mcp")
    assert problems_of(here, data) == [
        'auth.audience: "https://staal.test/mcp" is not server.http.public_url '
        '("https://mcp.example.com/mcp"), the URL clients use: a token\'s audience is the resource '
        "the server's metadata names, which is the URL clients reach it at; leave auth.audience "
        "out (it is then server.http.public_url) or make the two the same"]


@pytest.mark.parametrize("audience", ["https://staal.test/mcp", "http://127.0.0.1:8000/other"])
def test_without_a_public_url_an_audience_no_listening_url_can_be_is_refused_naming_both_keys(
        here, audience):
    data = with_auth(seed_example(), audience=audience)
    del data["server"]["http"]
    (problem,) = problems_of(here, data)
    assert problem.startswith(f'auth.audience: "{audience}" cannot be the URL clients use: '
                              "server.http.public_url is not set, so that is the URL `serve "
                              "--http` listens at, http://HOST:PORT/mcp"), problem


def test_without_a_public_url_an_audience_that_may_be_the_listening_url_loads(here):
    data = with_auth(seed_example(), audience="http://127.0.0.1:8000/mcp")
    del data["server"]["http"]
    assert check(data, here / "manifest.json").auth.audience == "http://127.0.0.1:8000/mcp"


def test_a_resource_url_whose_port_cannot_be_read_is_refused_naming_its_key(here):
    url = "https://mcp.example.com:99999/mcp"
    data = with_auth(seed_example(), audience=url)
    data["server"]["http"]["public_url"] = url
    unreadable = f'"{url}" is not a URL that can be read: Port out of range 0-65535'
    assert problems_of(here, data) == [f"server.http.public_url: {unreadable}",
                                       f"auth.audience: {unreadable}"]


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
    ({"audiense": "x"}, "auth.audiense: unknown key"),
])
def test_a_bad_auth_section_names_the_key(here, auth, expected):
    (problem,) = broken(here, lambda d: with_auth(d, **auth))
    assert problem.startswith(expected)


def with_provider(here: Path, auth: dict[str, Any]) -> list[str] | Any:
    """A manifest whose `auth` is `auth` (no issuer, no audience): the
    checked manifest, or its problems."""
    data = {**seed_example(), "auth": auth}
    try:
        return check(data, here / "manifest.json")
    except ManifestError as exc:
        return list(exc.problems)


def test_a_provider_names_its_program_entry_and_headers_kept_in_lower_case(here):
    auth = with_provider(here, {"credential": {"presence": "provider", "program": "verify.py",
                                               "headers": ["X-Api-Key", "X-Signature"],
                                               "timeout_ms": 500},
                                "required_scopes": ["tools"]}).auth
    assert auth.credential == CredentialConfig("provider", here / "verify.py", "verify",
                                               ("x-api-key", "x-signature"), 500)
    # The verifier checks the credential itself and names the issuer in its answer.
    assert (auth.issuer, auth.audience, auth.jwks_url) == (None, None, None)
    assert auth.required_scopes == ("tools",)


def test_without_auth_there_is_none_and_a_bearer_credential_needs_an_issuer(here):
    assert check(seed_example(), here / "manifest.json").auth is None
    assert with_provider(here, {"credential": {"presence": "bearer"}}) == ["auth.issuer: is required"]


@pytest.mark.parametrize("credential, problem", [
    ({"presence": "provider", "headers": ["x-api-key"]},
     'auth.credential.program: is required with presence "provider"'),
    ({"presence": "provider", "program": "missing.py", "headers": ["x-api-key"]},
     "auth.credential.program: {here}/missing.py does not exist or is not a file"),
    ({"presence": "provider", "program": "verify.py"},
     'auth.credential.headers: is required with presence "provider"'),
    ({"presence": "provider", "program": "verify.py", "headers": "x-api-key"},
     "auth.credential.headers: expected a list, not a string"),
    ({"presence": "provider", "program": "verify.py", "headers": []},
     "auth.credential.headers: must name at least one"),
    ({"presence": "provider", "program": "verify.py", "headers": ["x api key"]},
     'auth.credential.headers[0]: "x api key" is not a header name'),
    ({"presence": "provider", "program": "verify.py", "headers": ["x-a", "X-A"]},
     'auth.credential.headers[1]: "X-A" is named twice'),
    ({"presence": "provider", "program": "verify.py", "headers": ["Content-Type"]},
     'auth.credential.headers[0]: "Content-Type" is read by the transport itself and cannot '
     "carry a credential"),
    ({"presence": "provider", "program": "verify.py", "headers": ["x-a"], "entry": "not valid"},
     'auth.credential.entry: "not valid" is not a Python identifier'),
    ({"presence": "provider", "program": "verify.py", "headers": ["x-a"], "timeout_ms": 0},
     "auth.credential.timeout_ms: 0 is out of range (1 to 60000)"),
    ({"presence": "provider", "presense": "provider", "program": "verify.py", "headers": ["x-a"]},
     "auth.credential.presense: unknown key"),
])
def test_a_provider_credential_that_is_not_right_is_refused_naming_its_key_path(here, credential,
                                                                                 problem):
    problems = with_provider(here, {"credential": credential})
    assert isinstance(problems, list)
    assert len(problems) == 1, problems
    assert problems[0].startswith(problem.format(here=here)), problems


@pytest.mark.parametrize("key, value", [("issuer", ISSUER), ("audience", "https://mcp.example.com/mcp"),
                                        ("jwks_url", "https://auth.example.com/jwks"),
                                        ("algorithms", ["RS256"])])
def test_a_provider_refuses_the_bearer_tokens_own_keys(here, key, value):
    problems = with_provider(here, {key: value, "credential": {
        "presence": "provider", "program": "verify.py", "headers": ["x-a"]}})
    assert problems == [f"auth.{key}: is only read with a bearer token: a provider's verifier "
                        "checks the credential itself (and names the issuer in its answer)"]


def test_every_problem_of_the_credential_is_reported_at_once(here):
    problems = with_provider(here, {"credential": {"presence": "provider", "program": "missing.py",
                                                   "headers": ["host", 3]}, "issuer": "x"})
    assert [p.split(":", 1)[0] for p in problems] == [
        "auth.issuer", "auth.credential.program", "auth.credential.headers[1]"]


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
    from staal.manifest.check import load_manifest

    root = Path(__file__).resolve().parents[3]
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
    from staal.supervisor.workers.zygote import secret_names, worker_environment

    data = with_callers(seed_example())
    support = data["tools"][0]["profiles"]["support"]["pay"]
    support["needs"] = {**support["needs"], "key": {"env": "STRIPE_SUPPORT_KEY"}}
    monkeypatch.setenv("STRIPE_SUPPORT_KEY", "sk_support_zq4")
    manifest = check(data, here / "manifest.json")
    names = secret_names(manifest)
    assert names["refund_order"] == ("STRIPE_SECRET_KEY",)
    assert names["refund_order:support"] == ("STRIPE_SUPPORT_KEY",)
    assert "sk_support_zq4" not in worker_environment(manifest).values()
