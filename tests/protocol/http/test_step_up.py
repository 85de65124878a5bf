"""The scopes a refused request is told to get (protocol/http/step_up.py, issue 24
item 1): a 403 names a set that admits the request, keeping the scopes the
token holds that still count; a 401 without a token names the least any
profile needs; a principal no scope could admit gets no set at all."""

from __future__ import annotations

from staal.protocol.http.step_up import Asker, least_scopes, step_up_scopes

PROFILES = (("scope", "reader"), ("scope", "admin"), ("client_id", "ops-bot"))
KNOWN = ("staal", "reader", "admin")


def asker(*scopes: str, client: str = "app") -> Asker:
    return Asker(client, client, frozenset(scopes))


def test_a_token_with_a_profiles_scope_but_not_the_required_one_is_told_both():
    assert step_up_scopes(("staal",), PROFILES, KNOWN, asker("reader")) == ("staal", "reader")


def test_a_token_with_the_required_scope_that_no_profile_admits_is_told_the_least_profile_too():
    assert step_up_scopes(("staal",), PROFILES, KNOWN, asker("staal")) == ("staal", "reader")


def test_the_profile_needing_fewest_new_scopes_is_chosen_and_held_scopes_stay():
    assert step_up_scopes(("staal",), PROFILES, KNOWN, asker("admin", "openid")) == \
        ("staal", "admin")


def test_a_client_its_profile_admits_by_id_is_told_only_the_required_scopes_it_lacks():
    assert step_up_scopes(("staal",), PROFILES, KNOWN, asker(client="ops-bot")) == ("staal",)


def test_without_callers_the_required_scopes_are_named_with_those_held():
    assert step_up_scopes(("staal", "mcp"), None, ("staal", "mcp"), asker("mcp")) == \
        ("staal", "mcp")


def test_a_principal_no_profile_could_ever_match_gets_no_scope_to_loop_on():
    by_identity = (("client_id", "ops-bot"), ("sub", "alice"))
    assert step_up_scopes(("staal",), by_identity, ("staal",), asker("staal")) is None
    assert step_up_scopes((), by_identity, (), asker()) is None


def test_a_token_never_is_told_to_get_only_what_it_already_holds():
    for held in (("staal",), ("staal", "reader"), ("staal", "admin")):
        told = step_up_scopes(("staal",), PROFILES, KNOWN, asker(*held))
        assert told is None or not set(told) <= set(held)


def test_the_401_names_the_least_any_profile_needs_not_every_scope():
    assert least_scopes(("staal",), PROFILES[:2]) == ("staal", "reader")
    assert least_scopes(("staal",), PROFILES) == ("staal",)  # a client-id profile needs no scope
    assert least_scopes((), (("scope", "support"), ("scope", "ops"))) == ("support",)
    assert least_scopes(("mcp",), None) == ("mcp",)
    assert least_scopes((), None) == ()
