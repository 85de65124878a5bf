"""staal.worker.runs.broker and staal.worker.runs.urls: a grant's limits (uses, each,
max, only), how actions count against them, and narrowing (DESIGN.md
section 4).

A refusal's message is what the operator and the program read, so it is
asserted exactly.
"""

from __future__ import annotations

import dataclasses
import string
from types import MappingProxyType

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from staal.manifest.model import Grant, SecretRef
from staal.money import Money
from staal.program import CapabilityRefused
from staal.records.outcomes import Usage
from staal.worker.runs.broker import GrantState, ParamUsage
from staal.worker.runs.urls import UrlRefused, _segment_regex, allowed, prepare_patterns

REFUND = "payments.stripe.refund"


def usd(amount: str) -> Money:
    return Money(amount, "USD")


def state_of(grant: Grant, param: str = "cap") -> GrantState:
    return GrantState.for_param(param, grant)


def act(state: GrantState, money: Money | None = None, url: str | None = None,
        charged: tuple[Money, ...] = ()) -> None:
    """One action as the engine does it: checked first, counted after."""
    state.check(money=money, url=url)
    state.count(money, charged)


def refused(state: GrantState, money: Money | None = None, url: str | None = None) -> str:
    with pytest.raises(CapabilityRefused) as caught:
        state.check(money=money, url=url)
    assert caught.value.kind == "capability"
    return caught.value.message


def refund_grant(each: str | None = "50.00", most: str | None = None,
                 uses: int | None = None) -> Grant:
    needs = MappingProxyType({
        "get": Grant(cap="net.http.get", only=("https://api.stripe.com/v1/**",)),
        "post": Grant(cap="net.http.post", idempotency_key=True,
                      only=("https://api.stripe.com/v1/refunds",)),
        "key": SecretRef("STRIPE_KEY"),
    })
    return Grant(cap=REFUND, each=None if each is None else usd(each),
                 max=None if most is None else usd(most), uses=uses, needs=needs)


# -- uses ---------------------------------------------------------------


def test_the_action_after_the_last_allowed_use_is_refused_as_capability():
    state = state_of(Grant(cap="net.http.get", uses=1))
    act(state)
    assert refused(state) == "'net.http.get' allows 1 action per run; this would be action 2"


def test_every_allowed_use_passes_and_the_next_is_refused_with_its_number():
    state = state_of(Grant(cap="net.http.post", uses=3))
    for _ in range(3):
        act(state)
    assert refused(state) == "'net.http.post' allows 3 actions per run; this would be action 4"


def test_a_refused_action_is_not_counted_as_a_use():
    state = state_of(Grant(cap="net.http.get", uses=1))
    act(state)
    refused(state)
    assert state.used == 1
    assert state.usage.frozen().actions == 1


def test_a_grant_without_uses_allows_any_number_of_actions():
    state = state_of(Grant(cap="net.http.get"))
    for _ in range(100):
        act(state)
    assert state.usage.frozen().actions == 100


def test_the_check_itself_counts_nothing():
    state = state_of(Grant(cap="net.http.get", uses=1))
    for _ in range(5):
        state.check()
    act(state)
    assert state.used == 1


# -- each and max ------------------------------------------------------


def test_an_action_above_each_is_refused_with_the_limit_and_the_amount():
    state = state_of(refund_grant(each="50.00"))
    assert refused(state, money=usd("300")) == (
        "'payments.stripe.refund' allows at most 50.00 USD per action; "
        "this action needs 300.00 USD")


def test_an_action_of_exactly_each_is_allowed():
    state = state_of(refund_grant(each="50.00"))
    act(state, money=usd("50"))
    assert state.used == 1 and state.asked == {"USD": usd("50")}
    assert state.usage.frozen().actions == 1


def test_max_counts_the_money_asked_for_across_actions():
    state = state_of(refund_grant(each="50.00", most="120.00"))
    act(state, money=usd("50"))
    act(state, money=usd("50"))
    assert refused(state, money=usd("30")) == (
        "'payments.stripe.refund' allows at most 120.00 USD per run; 100.00 USD is already "
        "asked for and this action needs 30.00 USD")
    act(state, money=usd("20"))
    assert refused(state, money=usd("0.01")).startswith(
        "'payments.stripe.refund' allows at most 120.00 USD per run; 120.00 USD is already")


def test_max_counts_money_asked_for_even_when_less_was_charged():
    state = state_of(refund_grant(each=None, most="100.00"))
    state.check(money=usd("80"))
    state.count(usd("80"), ())  # asked for 80, the service charged nothing
    assert refused(state, money=usd("30")) == (
        "'payments.stripe.refund' allows at most 100.00 USD per run; 80.00 USD is already "
        "asked for and this action needs 30.00 USD")


@pytest.mark.parametrize("each, most", [("50.00", None), (None, "100.00"), ("50.00", "100.00")])
def test_an_action_in_another_currency_than_the_limits_is_refused(each, most):
    state = state_of(refund_grant(each=each, most=most))
    assert refused(state, money=Money("10", "EUR")) == (
        "'payments.stripe.refund' limits are in USD; this action is in EUR")


@pytest.mark.parametrize("amount, shown", [("0", "0.00 USD"), ("-5", "-5.00 USD"),
                                           ("-0.01", "-0.01 USD")])
def test_a_zero_or_negative_amount_is_refused(amount, shown):
    state = state_of(refund_grant(each="50.00", most="100.00"))
    assert refused(state, money=usd(amount)) == (
        f"'payments.stripe.refund' acts only on amounts above zero; this action has {shown}")


def test_a_negative_amount_cannot_make_room_under_max():
    state = state_of(refund_grant(each="50.00", most="60.00"))
    act(state, money=usd("50"))
    refused(state, money=usd("-50"))
    assert refused(state, money=usd("50")).startswith(
        "'payments.stripe.refund' allows at most 60.00 USD per run; 50.00 USD is already")


def test_uses_is_checked_on_a_money_grant_too():
    state = state_of(refund_grant(each="50.00", uses=1))
    act(state, money=usd("10"))
    assert refused(state, money=usd("10")) == (
        "'payments.stripe.refund' allows 1 action per run; this would be action 2")


# -- only --------------------------------------------------------------

API = "https://api.example.com"


def only_state(*patterns: str) -> GrantState:
    return state_of(Grant(cap="net.http.get", only=tuple(patterns)))


@pytest.mark.parametrize("url", [
    f"{API}/v1/customers/cus_1",
    f"{API}/v1/customers/cus_1?expand=charges",
])
def test_a_star_matches_within_one_segment(url):
    assert allowed((f"{API}/v1/customers/*",), url)


@pytest.mark.parametrize("url", [
    f"{API}/v1/customers",
    f"{API}/v1/customers/cus_1/charges",
    f"{API}/v1/customers/cus_1/",
    f"{API}/v1/customers/",  # the collection, not one of its members
])
def test_a_star_does_not_match_across_segments_or_a_missing_one(url):
    assert not allowed((f"{API}/v1/customers/*",), url)


def test_a_star_inside_a_segment_matches_only_that_segment():
    patterns = (f"{API}/v1/cus_*/orders",)
    assert allowed(patterns, f"{API}/v1/cus_42/orders")
    assert allowed(patterns, f"{API}/v1/cus_/orders")
    assert not allowed(patterns, f"{API}/v1/ord_42/orders")
    assert not allowed(patterns, f"{API}/v1/cus_4/2/orders")


def test_a_star_never_matches_an_empty_segment_between_slashes():
    # Many servers merge "//" into "/": "/v1//refunds" would reach "/v1/refunds".
    patterns = (f"{API}/v1/*/refunds",)
    assert not allowed(patterns, f"{API}/v1//refunds")
    assert allowed(patterns, f"{API}/v1/ch_1/refunds")


@pytest.mark.parametrize("url", [
    f"{API}/v1",
    f"{API}/v1/",
    f"{API}/v1/a",
    f"{API}/v1/a/b/c/d",
])
def test_a_double_star_matches_zero_or_more_segments(url):
    assert allowed((f"{API}/v1/**",), url)


@pytest.mark.parametrize("url, ok", [
    (f"{API}/v1/refunds", True),
    (f"{API}/v1/a/refunds", True),
    (f"{API}/v1/a/b/c/refunds", True),
    (f"{API}/v1/a/b/c/refunds/x", False),
    (f"{API}/v2/refunds", False),
])
def test_a_double_star_in_the_middle_spans_any_number_of_segments(url, ok):
    assert allowed((f"{API}/v1/**/refunds",), url) is ok


def test_a_literal_segment_must_match_exactly():
    patterns = (f"{API}/v1/refunds",)
    assert not allowed(patterns, f"{API}/v1/Refunds")
    assert not allowed(patterns, f"{API}/v1/refunds2")
    assert not allowed(patterns, f"{API}/v1/refunds/")


@pytest.mark.parametrize("url", [
    "http://api.example.com/v1/x",         # another scheme
    "https://api.example.org/v1/x",        # another host
    "https://evil.api.example.com/v1/x",   # a subdomain is another host
    "https://api.example.com.evil.org/v1/x",
    "https://api.example.com:8443/v1/x",   # another port
])
def test_scheme_host_and_port_must_match_exactly(url):
    assert not allowed((f"{API}/v1/*",), url)


@pytest.mark.parametrize("pattern, url", [
    ("https://api.example.com/v1/*", "https://api.example.com:443/v1/x"),
    ("https://api.example.com:443/v1/*", "https://api.example.com/v1/x"),
    ("http://api.example.com/v1/*", "http://api.example.com:80/v1/x"),
    ("http://api.example.com:8080/v1/*", "http://api.example.com:8080/v1/x"),
])
def test_default_ports_are_the_same_as_no_port(pattern, url):
    assert allowed((pattern,), url)


def test_the_host_and_scheme_are_case_insensitive():
    assert allowed((f"{API}/v1/*",), "HTTPS://API.Example.COM/v1/x")
    assert allowed(("https://API.example.com/v1/*",), f"{API}/v1/x")


def test_the_path_is_case_sensitive():
    assert not allowed((f"{API}/v1/*",), f"{API}/V1/x")


def test_the_query_and_fragment_are_not_part_of_the_match():
    patterns = (f"{API}/v1/charges",)
    assert allowed(patterns, f"{API}/v1/charges?limit=3&starting_after=/../admin")
    assert allowed(patterns, f"{API}/v1/charges#/../admin")
    assert not allowed(patterns, f"{API}/v1/admin?x=/v1/charges")


@pytest.mark.parametrize("url", [
    f"{API}/v1/a/../admin",
    f"{API}/v1/./a",
    f"{API}/v1/a/..",
    f"{API}/v1/%2e%2e/admin",
    f"{API}/v1/%2E/admin",
    f"{API}/v1/a%2fb",
    f"{API}/v1/a%2Fb",
    f"{API}/v1/a%5cb",
    f"{API}/v1/a\\b",
    "https://user:pw@api.example.com/v1/a",
    "https://user@api.example.com/v1/a",
    "https://:pw@api.example.com/v1/a",
    "ftp://api.example.com/v1/a",
    "https:///v1/a",
    "/v1/a",
    "https://api.example.com:99999/v1/a",
])
def test_urls_that_could_mean_another_path_are_refused_before_matching(url):
    with pytest.raises(UrlRefused) as caught:
        allowed((f"{API}/**",), url)
    assert str(caught.value).startswith(f"URL {url!r}: ")  # names the URL, then why


def test_a_url_outside_only_is_refused_with_what_only_allows():
    state = only_state(f"{API}/v1/customers/*", f"{API}/v1/charges/*")
    assert refused(state, url=f"{API}/v1/refunds/re_1") == (
        f"'net.http.get' does not allow {API}/v1/refunds/re_1; it allows "
        f"{API}/v1/customers/*, {API}/v1/charges/*")


def test_a_suspicious_url_is_refused_as_capability_with_the_reason():
    state = only_state(f"{API}/**")
    assert refused(state, url=f"{API}/v1/../admin") == (
        f"'net.http.get' refuses URL '{API}/v1/../admin': its path has a . or .. segment")


@pytest.mark.parametrize("url, why", [
    (f"{API}/v1/../admin", "its path has a . or .. segment"),
    (f"{API}/v1/%2e%2e/admin", "its path has an encoded slash, backslash or dot"),
    ("https://user:pw@api.example.com/v1/x", "it carries credentials"),
    ("ftp://api.example.com/v1/x", "it is not an http or https URL with a host"),
    ("https://api.example.com:99999/v1/x", "its port is not a port number"),
])
def test_each_url_refusal_reads_as_a_sentence_naming_the_url_and_why(url, why):
    assert refused(only_state(f"{API}/**"), url=url) == f"'net.http.get' refuses URL '{url}': {why}"


def test_a_url_that_is_not_a_string_is_refused_naming_its_type():
    assert refused(only_state(f"{API}/**"), url=7) == (
        "'net.http.get' refuses URL 7 (int): a URL is a string")


def test_a_url_inside_only_is_allowed_and_counted():
    state = only_state(f"{API}/v1/customers/*")
    act(state, url=f"{API}/v1/customers/cus_1")
    assert state.usage.frozen().actions == 1


def test_a_grant_without_only_does_not_look_at_the_url():
    state = state_of(Grant(cap="net.http.get"))
    act(state, url="https://anywhere.example.net/x")
    # Not even one an `only` would refuse three times over (the HTTP layer's business).
    act(state, url="ftp://user:pw@anywhere.example.net/../x")
    assert state.used == 2 and state.usage.frozen().actions == 2


# Segment-safe text: no "/", no "%", no "." (so never a dot segment), not empty.
SEGMENT = st.text(alphabet=string.ascii_letters + string.digits + "-_~", min_size=1, max_size=12)
HOST = st.lists(st.text(alphabet=string.ascii_lowercase + string.digits, min_size=1, max_size=8),
                min_size=1, max_size=3).map(lambda labels: ".".join(labels) + ".example")
PIECE = st.one_of(
    SEGMENT,                                   # a literal segment
    st.just("*"),                              # a whole segment
    st.tuples(SEGMENT, SEGMENT).map(lambda p: f"{p[0]}*{p[1]}"),  # a star inside one
)


@st.composite
def pattern_and_url(draw: st.DrawFn) -> tuple[str, str, list[str]]:
    """A `*`-only pattern and a URL made from it by filling every `*`."""
    scheme = draw(st.sampled_from(["http", "https"]))
    host = draw(HOST)
    pieces = draw(st.lists(PIECE, min_size=1, max_size=6))
    segments = []
    for piece in pieces:
        before, *after = piece.split("*")
        segments.append(before + "".join(draw(SEGMENT) + rest for rest in after))
    return (f"{scheme}://{host}/{'/'.join(pieces)}",
            f"{scheme}://{host}/{'/'.join(segments)}", segments)


@settings(max_examples=300)
@given(pattern_and_url())
def test_a_url_made_from_a_pattern_by_filling_its_stars_always_matches(case):
    pattern, url, _ = case
    assert allowed((pattern,), url)


@settings(max_examples=300)
@given(pattern_and_url(), SEGMENT, st.data())
def test_inserting_an_extra_segment_never_matches_a_star_only_pattern(case, extra, data):
    pattern, url, segments = case
    at = data.draw(st.integers(0, len(segments)))
    longer = [*segments[:at], extra, *segments[at:]]
    origin = url[: url.index("/", len("https://"))]
    assert not allowed((pattern,), f"{origin}/{'/'.join(longer)}")


@settings(max_examples=200)
@given(pattern_and_url(), st.data())
def test_removing_a_segment_never_matches_a_star_only_pattern(case, data):
    pattern, url, segments = case
    at = data.draw(st.integers(0, len(segments) - 1))
    shorter = segments[:at] + segments[at + 1:]
    origin = url[: url.index("/", len("https://"))]
    assert not allowed((pattern,), f"{origin}/{'/'.join(shorter)}")


@settings(max_examples=200)
@given(pattern_and_url(), st.text(alphabet=string.ascii_letters + "=&/.%2f", max_size=20))
def test_a_query_never_changes_whether_a_url_matches(case, query):
    pattern, url, _ = case
    assert allowed((pattern,), f"{url}?{query}")


@settings(max_examples=200)
@given(pattern_and_url(), st.data())
def test_the_case_of_the_host_never_changes_whether_a_url_matches(case, data):
    pattern, url, _ = case
    scheme, rest = url.split("://", 1)
    host, path = rest.split("/", 1)
    flips = data.draw(st.lists(st.booleans(), min_size=len(host), max_size=len(host)))
    shouted = "".join(c.upper() if flip else c for c, flip in zip(host, flips, strict=True))
    assert allowed((pattern,), f"{scheme}://{shouted}/{path}")


@settings(max_examples=200)
@given(pattern_and_url(), HOST)
def test_a_url_on_another_host_never_matches(case, other):
    pattern, url, _ = case
    scheme, rest = url.split("://", 1)
    host, path = rest.split("/", 1)
    if other == host:
        other = "x" + other
    assert not allowed((pattern,), f"{scheme}://{other}/{path}")


@settings(max_examples=200)
@given(st.lists(SEGMENT, max_size=3), st.lists(SEGMENT, max_size=5), st.lists(SEGMENT, max_size=3))
def test_a_double_star_matches_any_run_of_segments_between_its_prefix_and_suffix(
        prefix, middle, suffix):
    pattern = "/".join([API, *prefix, "**", *suffix])
    assert allowed((pattern,), "/".join([API, *prefix, *middle, *suffix]))


# -- narrowing ---------------------------------------------------------


def test_narrowing_uses_to_one_refuses_a_second_action_the_parent_would_allow():
    parent = state_of(Grant(cap="net.http.get", uses=5))
    child = parent.narrow(uses=1)
    act(child)
    assert refused(child) == "'net.http.get' allows 1 action per run; this would be action 2"
    act(parent)  # the parent itself still has uses left


def test_actions_through_a_narrowed_child_count_against_the_parent():
    parent = state_of(Grant(cap="net.http.get", uses=2))
    child = parent.narrow(only=["https://example.com/**"])
    act(child)
    act(child)
    assert refused(parent) == "'net.http.get' allows 2 actions per run; this would be action 3"
    assert refused(child) == "'net.http.get' allows 2 actions per run; this would be action 3"


def test_narrowing_uses_above_the_binding_limit_is_refused():
    parent = state_of(Grant(cap="net.http.get", uses=2))
    with pytest.raises(CapabilityRefused) as caught:
        parent.narrow(only=["https://example.com/**"]).narrow(uses=3)
    assert caught.value.message == "narrowing may not widen 'net.http.get': uses 3 is more than 2"


def test_narrowing_only_to_something_that_is_not_a_pattern_is_refused():
    with pytest.raises(CapabilityRefused) as caught:
        state_of(Grant(cap="net.http.get")).narrow(only=["https://example.com:99999/x"])
    assert caught.value.message.startswith(
        "narrow(only=...): 'https://example.com:99999/x' is not a URL pattern: ")


def test_actions_through_a_grandchild_count_against_every_ancestor():
    parent = state_of(Grant(cap="net.http.get", uses=3))
    child = parent.narrow(uses=2)
    grandchild = child.narrow(uses=1)
    act(grandchild)
    act(child)
    assert (parent.used, child.used, grandchild.used) == (2, 2, 1)
    assert refused(child) == "'net.http.get' allows 2 actions per run; this would be action 3"
    act(parent)
    assert refused(parent) == "'net.http.get' allows 3 actions per run; this would be action 4"


def test_narrowing_each_below_the_parent_applies_the_narrower_limit():
    parent = state_of(refund_grant(each="50.00"))
    child = parent.narrow(each=usd("20"))
    assert refused(child, money=usd("30")) == (
        "'payments.stripe.refund' allows at most 20.00 USD per action; this action needs 30.00 USD")
    act(parent, money=usd("30"))


def test_narrowing_each_above_the_parent_each_is_refused():
    parent = state_of(refund_grant(each="50.00"))
    with pytest.raises(CapabilityRefused) as caught:
        parent.narrow(each=usd("60"))
    assert caught.value.kind == "capability"
    assert caught.value.message == (
        "narrowing may not widen 'payments.stripe.refund': each 60.00 USD is more than 50.00 USD")


def test_narrowing_max_above_the_parent_max_is_refused():
    parent = state_of(refund_grant(each="50.00", most="100.00"))
    with pytest.raises(CapabilityRefused) as caught:
        parent.narrow(max=usd("100.01"))
    assert caught.value.message == (
        "narrowing may not widen 'payments.stripe.refund': max 100.01 USD is more than 100.00 USD")


def test_narrowing_money_to_another_currency_is_refused():
    parent = state_of(refund_grant(each="50.00"))
    with pytest.raises(CapabilityRefused) as caught:
        parent.narrow(each=Money("1", "EUR"))
    assert caught.value.message == (
        "narrowing may not widen 'payments.stripe.refund': each 1.00 EUR is more than 50.00 USD")
    assert parent.limits.each == usd("50")


def test_a_narrowed_max_counts_only_what_was_asked_through_the_child_but_the_parent_counts_all():
    parent = state_of(refund_grant(each="50.00", most="100.00"))
    act(parent, money=usd("50"))
    child = parent.narrow(max=usd("40"))
    act(child, money=usd("40"))
    assert refused(child, money=usd("1")).startswith(
        "'payments.stripe.refund' allows at most 40.00 USD per run; 40.00 USD is already")
    assert refused(parent, money=usd("20")) == (
        "'payments.stripe.refund' allows at most 100.00 USD per run; 90.00 USD is already "
        "asked for and this action needs 20.00 USD")


def test_narrowing_only_intersects_with_the_parent_list():
    parent = only_state(f"{API}/v1/**")
    child = parent.narrow(only=[f"{API}/v1/charges/*", "https://other.example.com/**"])
    act(child, url=f"{API}/v1/charges/ch_1")
    assert refused(child, url=f"{API}/v1/refunds/re_1") == (
        f"'net.http.get' does not allow {API}/v1/refunds/re_1; it allows "
        f"{API}/v1/charges/*, https://other.example.com/**")
    # In the child's list but not the parent's: still refused, by the parent.
    assert refused(child, url="https://other.example.com/x") == (
        f"'net.http.get' does not allow https://other.example.com/x; it allows {API}/v1/**")


def test_narrowing_only_on_a_grant_without_only_limits_the_child():
    parent = state_of(Grant(cap="net.http.get"))
    child = parent.narrow(only=(f"{API}/v1/*",))
    act(child, url=f"{API}/v1/x")
    assert refused(child, url=f"{API}/v2/x") == (
        f"'net.http.get' does not allow {API}/v2/x; it allows {API}/v1/*")
    assert (child.used, parent.used) == (1, 1)  # the refused action counted nowhere
    act(parent, url=f"{API}/v2/x")
    assert (child.used, parent.used) == (1, 2) and parent.usage.frozen().actions == 2
    assert parent.limits.only is None


@pytest.mark.parametrize("only", ["https://api.example.com/**", [1], [None]])
def test_narrowing_only_takes_a_list_of_patterns(only):
    with pytest.raises(CapabilityRefused) as caught:
        only_state(f"{API}/**").narrow(only=only)
    assert caught.value.message == "narrow(only=...) takes a list of URL patterns"


def test_narrowing_an_unknown_limit_raises_type_error():
    with pytest.raises(TypeError) as caught:
        state_of(Grant(cap="net.http.get")).narrow(headers={"x": "y"})
    assert str(caught.value) == "narrow() takes uses, each, max, only, not headers"


@pytest.mark.parametrize("uses", [-1, True, 1.5, "1"])
def test_narrowing_uses_takes_a_count(uses):
    with pytest.raises(CapabilityRefused) as caught:
        state_of(Grant(cap="net.http.get", uses=3)).narrow(uses=uses)
    assert caught.value.message == f"narrow(uses=...) takes a count, not {uses!r}"


def test_narrowing_uses_to_zero_allows_no_action():
    child = state_of(Grant(cap="net.http.get")).narrow(uses=0)
    assert refused(child) == "'net.http.get' allows 0 actions per run; this would be action 1"


def test_narrowing_money_takes_money():
    with pytest.raises(CapabilityRefused) as caught:
        state_of(refund_grant()).narrow(each="20.00")
    assert caught.value.message == "narrow(each=...) takes Money, not '20.00'"


def test_narrowing_leaves_the_parent_limits_as_they_were():
    parent = state_of(refund_grant(each="50.00", uses=3))
    before = dataclasses.replace(parent.limits)
    parent.narrow(each=usd("10"), uses=1)
    assert parent.limits == before and before.each == usd("50") and before.uses == 3
    act(parent, money=usd("50"))
    act(parent, money=usd("50"))
    assert parent.used == 2 and parent.asked == {"USD": usd("100")}


def test_a_narrowed_composite_shares_its_parent_needs_states():
    parent = state_of(refund_grant(), param="pay")
    child = parent.narrow(uses=1)
    assert set(parent.needs) == {"get", "post"}  # the secret is not a state
    assert child.needs is parent.needs
    assert child.narrow(each=usd("1")).needs["post"] is parent.needs["post"]


def test_a_composite_needs_are_states_of_their_own_grants():
    parent = state_of(refund_grant(), param="pay")
    post = parent.needs["post"]
    assert post.cap == "net.http.post"
    assert post.param == "pay.post"
    assert refused(post, url="https://api.stripe.com/v1/charges") == (
        "'net.http.post' does not allow https://api.stripe.com/v1/charges; "
        "it allows https://api.stripe.com/v1/refunds")


def test_usage_counts_every_action_and_the_money_charged_per_currency_across_children():
    parent = state_of(Grant(cap=REFUND, each=usd("50.00"), uses=10))
    child = parent.narrow(each=usd("20"))
    grandchild = child.narrow(uses=1)
    act(parent, money=usd("50"), charged=(usd("50"),))
    act(child, money=usd("20"), charged=(usd("12.50"),))
    act(grandchild, money=usd("5"), charged=(usd("5"), Money("300", "JPY")))
    act(child, money=usd("1"), charged=())
    assert parent.usage is child.usage is grandchild.usage
    assert parent.usage.frozen() == Usage(
        actions=4, charged=(Money("300", "JPY"), usd("67.50")))


def test_usage_charged_is_sorted_by_currency_and_one_per_currency():
    usage = ParamUsage()
    usage.add((Money("1", "USD"),))
    usage.add((Money("2", "EUR"), Money("3", "USD")))
    usage.add(())
    assert usage.frozen() == Usage(actions=3, charged=(Money("2", "EUR"), Money("4", "USD")))


def test_patterns_prepared_ahead_match_as_before_and_leave_nothing_to_compile():
    """The zygote prepares each grant's `only` (worker/processes/zygote.py `warm`): a
    worker's check then compiles no regular expression."""
    patterns = ("https://api.example.com/v9/*-prepared/**", "https://api.example.com/v9/ok")
    prepare_patterns(patterns)
    compiled = _segment_regex.cache_info().misses
    assert allowed(patterns, "https://api.example.com/v9/x-prepared/a/b")
    assert allowed(patterns, "https://api.example.com/v9/ok")
    assert not allowed(patterns, "https://api.example.com/v9/x-other/a")
    assert _segment_regex.cache_info().misses == compiled
