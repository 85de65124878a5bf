"""Money: exact, per currency, with the wire form's refusals (DESIGN.md section 3)."""

from __future__ import annotations

import pickle
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from staal.currencies import MINOR_UNITS
from staal.errors import CurrencyMismatch, MoneyError
from staal.money import AMOUNT_PATTERN, MAX_MINOR, Money, currency_exponent

currencies = st.sampled_from(sorted(MINOR_UNITS))
minors = st.integers(min_value=-MAX_MINOR, max_value=MAX_MINOR)
small_minors = st.integers(min_value=-(10**12), max_value=10**12)


@st.composite
def moneys(draw, currency=None, minor=small_minors):
    return Money.from_minor(draw(minor), currency or draw(currencies))


def test_currency_minor_units_follow_iso_4217():
    assert currency_exponent("USD") == 2
    assert currency_exponent("JPY") == 0
    assert currency_exponent("KWD") == 3
    assert currency_exponent("CLF") == 4
    assert Money("500", "JPY").canonical_amount() == "500"
    assert Money("1.5", "BHD").canonical_amount() == "1.500"


def test_amounts_written_with_and_without_cents_are_the_same_money():
    assert Money("35", "USD") == Money("35.00", "USD") == Money("35.0", "USD")
    assert Money("35", "USD").to_wire() == {"amount": "35.00", "currency": "USD"}
    assert hash(Money("35", "USD")) == hash(Money("35.00", "USD"))


@given(moneys(minor=minors))
def test_the_wire_form_round_trips_exactly(money):
    assert Money.from_wire(money.to_wire()) == money
    assert Money(money.canonical_amount(), money.currency) == money


@given(moneys(minor=minors))
def test_the_canonical_amount_has_exactly_the_currencys_minor_digits(money):
    text = money.canonical_amount()
    fraction = text.partition(".")[2]
    assert len(fraction) == currency_exponent(money.currency)
    assert Decimal(text) == money.amount


@given(moneys(currency="USD"), moneys(currency="USD"), moneys(currency="USD"))
def test_addition_is_exact_associative_and_has_an_inverse(a, b, c):
    assert (a + b) + c == a + (b + c)
    assert (a + b).amount == a.amount + b.amount
    assert (a + b) - b == a
    assert a - a == Money.zero("USD")
    assert -(-a) == a  # noqa: B002 - negated twice, on purpose


@given(moneys(currency="EUR"), st.integers(min_value=0, max_value=1000))
def test_multiplying_by_a_count_is_repeated_addition(money, times):
    total = Money.zero("EUR")
    for _ in range(min(times, 20)):
        total = total + money
    if times <= 20:
        assert money * times == total
    assert (money * times).minor == money.minor * times
    assert times * money == money * times


@given(moneys(currency="USD"), moneys(currency="USD"))
def test_ordering_agrees_with_the_decimal_amounts(a, b):
    assert (a < b) == (a.amount < b.amount)
    assert (a <= b) == (a.amount <= b.amount)
    assert (a > b) == (a.amount > b.amount)
    assert (a >= b) == (a.amount >= b.amount)


def test_comparing_two_currencies_is_refused():
    with pytest.raises(CurrencyMismatch) as caught:
        _ = Money("1", "USD") < Money("1", "EUR")
    assert caught.value.kind == "currency_mismatch"
    with pytest.raises(CurrencyMismatch):
        _ = Money("1", "USD") >= Money("1", "EUR")


def test_adding_two_currencies_is_refused():
    with pytest.raises(CurrencyMismatch) as added:
        _ = Money("1", "USD") + Money("1", "EUR")
    assert added.value.message == "cannot add 1.00 USD and 1.00 EUR: different currencies"
    with pytest.raises(CurrencyMismatch) as subtracted:
        _ = Money("1", "USD") - Money("1", "EUR")
    assert subtracted.value.message == (
        "cannot subtract 1.00 USD and 1.00 EUR: different currencies")


def test_money_of_two_currencies_is_never_equal():
    assert Money("1", "USD") != Money("1", "EUR")
    assert Money("1", "USD") != "1.00 USD"


def test_a_json_number_amount_is_refused_as_a_number():
    with pytest.raises(MoneyError) as caught:
        Money.from_wire({"amount": 35.5, "currency": "USD"})
    assert caught.value.field == "amount"
    assert "number" in caught.value.message
    with pytest.raises(MoneyError):
        Money.from_wire({"amount": 35, "currency": "USD"})


def test_more_decimals_than_the_currency_has_are_refused():
    for amount, currency in (("35.001", "USD"), ("35.000", "USD"), ("500.5", "JPY"), ("1.0001", "KWD")):
        with pytest.raises(MoneyError) as caught:
            Money.from_wire({"amount": amount, "currency": currency})
        assert caught.value.field == "amount"
        assert "decimals" in caught.value.message


def test_an_amount_too_large_to_hold_exactly_is_refused():
    with pytest.raises(MoneyError) as caught:
        Money("92233720368547758.08", "USD")
    assert "too large" in caught.value.message
    assert Money("92233720368547758.07", "USD").minor == MAX_MINOR
    with pytest.raises(MoneyError):
        Money("9" * 100_000, "USD")
    with pytest.raises(MoneyError):
        Money.from_minor(MAX_MINOR, "USD") + Money("0.01", "USD")


@pytest.mark.parametrize(
    "amount",
    ["", " 35", "35 ", "+35", "35.", ".5", "3.5e1", "1e3", "0x10", "NaN", "Infinity", "3,50",
     "35.00\n", "٣٥", "--1", "1.2.3"],
)
def test_text_that_is_not_a_plain_decimal_is_refused(amount):
    with pytest.raises(MoneyError) as caught:
        Money.from_wire({"amount": amount, "currency": "USD"})
    assert caught.value.field == "amount"


@pytest.mark.parametrize("currency", ["usd", "US", "USDX", "XXX", "XAU", "", 840, None])
def test_a_currency_that_is_not_an_iso_4217_code_with_minor_units_is_refused(currency):
    with pytest.raises(MoneyError) as caught:
        Money.from_wire({"amount": "1", "currency": currency})
    assert caught.value.field == "currency"


def test_the_wire_form_is_exactly_amount_and_currency():
    for wire, field, message in [
        ({"amount": "1"}, "currency", "currency is required"),
        ({"amount": "1", "currency": "USD", "note": "x"}, "note",
         'unknown key "note" (money has amount and currency)'),
        (["1", "USD"], None,
         'money must be an object {"amount": "35.00", "currency": "USD"}, not list'),
        ({"amount": True, "currency": "USD"}, "amount", "amount must be a decimal string, not True"),
    ]:
        with pytest.raises(MoneyError) as caught:
            Money.from_wire(wire)
        assert (caught.value.field, caught.value.message) == (field, message)


@given(st.from_regex(r"-?[0-9]{1,16}(\.[0-9]{1,2})?", fullmatch=True))
def test_every_text_the_pattern_accepts_within_range_is_accepted(text):
    import re

    assert re.fullmatch(AMOUNT_PATTERN, text)
    money = Money(text, "USD")
    assert money.amount == Decimal(text)


def test_from_minor_takes_a_payment_services_lower_case_currency():
    assert Money.from_minor(3500, "usd") == Money("35.00", "USD")
    with pytest.raises(MoneyError):
        Money.from_minor(1.5, "USD")


def test_decimals_are_held_by_value():
    assert Money(Decimal("35.000"), "USD") == Money("35", "USD")
    with pytest.raises(MoneyError):
        Money(Decimal("35.005"), "USD")
    with pytest.raises(MoneyError):
        Money(Decimal("NaN"), "USD")
    with pytest.raises(MoneyError):
        Money(35.5, "USD")  # a float is never money


def test_money_is_immutable_and_pickles_to_itself():
    money = Money("12.34", "EUR")
    with pytest.raises(AttributeError):
        money._minor = 1  # type: ignore[misc]
    assert pickle.loads(pickle.dumps(money)) == money
    assert str(money) == "12.34 EUR"
    assert repr(money) == "Money('12.34', 'EUR')"


def test_negative_amounts_are_written_with_a_sign():
    assert Money("-0.05", "USD").canonical_amount() == "-0.05"
    assert Money("-0", "USD") == Money.zero("USD")
    assert Money.from_minor(-5, "JPY").canonical_amount() == "-5"
