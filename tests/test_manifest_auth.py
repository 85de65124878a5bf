"""The manifest's `auth.credential` (issue 14, item 3): bearer by default,
or the operator's verifier program, checked with every problem at once,
each naming its key path."""

from __future__ import annotations

from pathlib import Path

import pytest

from staal.errors import ManifestError
from staal.manifest import CredentialConfig
from staal.manifest_check import check
from tests.manifests import seed_example, write_programs


@pytest.fixture
def here(tmp_path: Path) -> Path:
    write_programs(tmp_path)
    (tmp_path / "verify.py").write_text("def verify(request):\n    return {'subject': 'x'}\n")
    return tmp_path


def with_auth(here: Path, auth) -> list[str] | object:
    data = {**seed_example(), "auth": auth}
    try:
        return check(data, here / "manifest.json")
    except ManifestError as exc:
        return list(exc.problems)


def test_without_auth_there_is_none_and_an_empty_credential_is_bearer(here):
    assert check(seed_example(), here / "manifest.json").auth is None
    assert with_auth(here, {}).auth.credential == CredentialConfig()
    assert with_auth(here, {"credential": {"presence": "bearer"}}).auth.credential.presence == "bearer"


def test_a_provider_names_its_program_entry_and_headers_kept_in_lower_case(here):
    auth = with_auth(here, {"credential": {"presence": "provider", "program": "verify.py",
                                           "headers": ["X-Api-Key", "X-Signature"],
                                           "timeout_ms": 500}}).auth
    assert auth.credential == CredentialConfig("provider", here / "verify.py", "verify",
                                               ("x-api-key", "x-signature"), 500)


@pytest.mark.parametrize("credential, problem", [
    ({"presence": "magic"}, 'auth.credential.presence: "magic" is not a credential presence '
                            "(known: bearer, provider)"),
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
    ({"presence": "bearer", "program": "verify.py"},
     'auth.credential.program: is only read with presence "provider"'),
    ({"presense": "provider"}, "auth.credential.presense: unknown key"),
])
def test_a_credential_that_is_not_right_is_refused_naming_its_key_path(here, credential, problem):
    problems = with_auth(here, {"credential": credential})
    assert isinstance(problems, list)
    assert len(problems) == 1, problems
    assert problems[0].startswith(problem.format(here=here)), problems


def test_every_problem_of_the_credential_is_reported_at_once(here):
    problems = with_auth(here, {"credential": {"presence": "provider", "program": "missing.py",
                                               "headers": ["host", 3]}, "issuer": "x"})
    assert [p.split(":", 1)[0] for p in problems] == [
        "auth.issuer", "auth.credential.program", "auth.credential.headers[1]"]
