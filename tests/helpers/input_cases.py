"""THE table of input cases: `(type description, JSON value, accepted, note)`.

Every case is run through the runtime's check (`staal.inputs.arguments.check_arguments`)
and through a JSON Schema validator of `staal.inputs.schema.to_json_schema`; both
must agree with `accepted`. A note starting with `GAP` marks the one known
disagreement (seed 000 section 4): a money amount too large to hold exactly,
refused by the runtime (`accepted` is False) and accepted by the schema.
"""

from __future__ import annotations

from typing import Any

GAP = "GAP: too large to hold exactly"

STR = {"type": "str"}
INT = {"type": "int"}
BOOL = {"type": "bool"}
DECIMAL = {"type": "decimal"}
MONEY = {"type": "money"}
JSON = {"type": "json"}


def list_of(t: dict) -> dict:
    return {"type": "list", "items": t}


def dict_of(t: dict) -> dict:
    return {"type": "dict", "values": t}


def optional(t: dict) -> dict:
    return {"type": "optional", "of": t}


def literal(*values: Any) -> dict:
    return {"type": "literal", "values": list(values)}


def record(name: str, fields: dict, required: list[str]) -> dict:
    return {"type": "record", "name": name, "fields": fields, "required": required}


def money(amount: Any, currency: Any = "USD") -> dict:
    return {"amount": amount, "currency": currency}


ADDRESS = record("Address", {"street": STR, "city": STR, "zip": optional(STR)},
                 ["street", "city"])
LINE = record("Line", {"sku": STR, "price": MONEY, "qty": INT}, ["sku", "price"])
ORDER = record("Order", {"lines": list_of(LINE), "ship_to": ADDRESS, "note": JSON},
               ["lines"])
EMPTY_RECORD = record("Nothing", {}, [])
COLOUR = literal("red", "blue")
SMALL = literal(1, 2)
YES = literal(True)
ZERO_OR_FALSE = literal(0, False)

HOME = {"street": "1 Main St", "city": "Springfield"}

CASES: list[tuple[dict, Any, bool, str]] = [
    # -- str
    (STR, "", True, "the empty string"),
    (STR, "héllo\nwörld ☃", True, "any unicode, newlines included"),
    (STR, 12, False, "a number is not a string"),
    (STR, None, False, "null is not a string"),
    (STR, True, False, "true is not a string"),
    (STR, ["a"], False, "a list is not a string"),
    (STR, {"a": "b"}, False, "an object is not a string"),
    # -- int
    (INT, 0, True, "zero"),
    (INT, -17, True, "a negative number"),
    (INT, 2**63 - 1, True, "the largest signed 64-bit number"),
    (INT, -(2**63), True, "the smallest signed 64-bit number"),
    (INT, 2**63, False, "one more than the largest"),
    (INT, -(2**63) - 1, False, "one less than the smallest"),
    (INT, 2**64, False, "a 65-bit number"),
    (INT, True, False, "true is not a number"),
    (INT, False, False, "false is not 0"),
    (INT, 1.0, True, "1.0 is a whole number, as JSON Schema has it"),
    (INT, -0.0, True, "-0.0 is zero"),
    (INT, 9.2e18, True, "a whole float within range"),
    (INT, 1e19, False, "a whole float beyond range"),
    (INT, 1.5, False, "a fraction"),
    (INT, "1", False, "a string of digits is not a number"),
    (INT, None, False, "null"),
    # -- bool
    (BOOL, True, True, "true"),
    (BOOL, False, True, "false"),
    (BOOL, 1, False, "1 is not true"),
    (BOOL, 0, False, "0 is not false"),
    (BOOL, 1.0, False, "1.0 is not true"),
    (BOOL, "true", False, "a string is not a boolean"),
    (BOOL, None, False, "null is not false"),
    # -- decimal
    (DECIMAL, "0", True, "zero"),
    (DECIMAL, "12.50", True, "trailing zeros"),
    (DECIMAL, "-3.14159", True, "negative with decimals"),
    (DECIMAL, "007", True, "leading zeros"),
    (DECIMAL, "-0", True, "negative zero"),
    (DECIMAL, "1" * 100, True, "100 characters"),
    (DECIMAL, "0." + "1" * 98, True, "100 characters with 98 decimals"),
    (DECIMAL, "1" * 101, False, "101 characters"),
    (DECIMAL, "", False, "the empty string"),
    (DECIMAL, "1.", False, "a point without decimals"),
    (DECIMAL, ".5", False, "decimals without a whole part"),
    (DECIMAL, "+1", False, "a plus sign"),
    (DECIMAL, "1e5", False, "an exponent"),
    (DECIMAL, "1,5", False, "a decimal comma"),
    (DECIMAL, "1 000", False, "a space inside"),
    (DECIMAL, " 1", False, "a leading space"),
    (DECIMAL, "1\n", False, "a trailing newline"),
    (DECIMAL, "NaN", False, "not a number"),
    (DECIMAL, "Infinity", False, "infinity"),
    (DECIMAL, "١٢", False, "non-ASCII digits"),
    (DECIMAL, "5O.00", False, "a letter O for a zero"),
    (DECIMAL, 12, True, "a JSON integer"),
    (DECIMAL, -12, True, "a negative JSON integer"),
    (DECIMAL, 2**53 - 1, True, "the largest exact JSON integer"),
    (DECIMAL, -(2**53 - 1), True, "the smallest exact JSON integer"),
    (DECIMAL, 2**53, False, "an integer where JSON numbers stop being exact"),
    (DECIMAL, 2.0, True, "a whole float is an integer"),
    (DECIMAL, 1.5, False, "a JSON number with a fraction may have lost digits"),
    (DECIMAL, 0.1, False, "0.1 is not exactly one tenth as a JSON number"),
    (DECIMAL, True, False, "true is not a number"),
    (DECIMAL, None, False, "null"),
    (DECIMAL, money("1"), False, "money is not a decimal"),
    # -- money
    (MONEY, money("35.00"), True, "dollars and cents"),
    (MONEY, money("35"), True, "no decimals"),
    (MONEY, money("35.0"), True, "fewer decimals than the currency has"),
    (MONEY, money("-5.00"), True, "a negative amount"),
    (MONEY, money("0"), True, "zero"),
    (MONEY, money("0000000000000000000000000001.00"), True, "leading zeros hold nothing"),
    (MONEY, money("35.001"), False, "three decimals in USD"),
    (MONEY, money("500", "JPY"), True, "yen have no decimals"),
    (MONEY, money("500.0", "JPY"), False, "a decimal point in yen"),
    (MONEY, money("500.5", "JPY"), False, "a fraction of a yen"),
    (MONEY, money("1.234", "KWD"), True, "dinar have three decimals"),
    (MONEY, money("1.2345", "KWD"), False, "four decimals in dinar"),
    (MONEY, money("1.2345", "CLF"), True, "CLF has four decimals"),
    (MONEY, money("1.23456", "CLF"), False, "five decimals in CLF"),
    (MONEY, money("35.00", "usd"), False, "a lowercase currency"),
    (MONEY, money("35.00", "XXX"), False, "a code without minor units"),
    (MONEY, money("35.00", "US"), False, "not a currency code"),
    (MONEY, money("35.00", None), False, "a null currency"),
    (MONEY, money("35.00", 840), False, "a numeric currency code"),
    (MONEY, money(35), False, "a JSON number amount"),
    (MONEY, money(35.5), False, "a JSON number with a fraction"),
    (MONEY, money(None), False, "a null amount"),
    (MONEY, money("35,00"), False, "a decimal comma"),
    (MONEY, money("+5"), False, "a plus sign"),
    (MONEY, money("5\n"), False, "a trailing newline"),
    (MONEY, money("1e3"), False, "an exponent"),
    (MONEY, {"amount": "35.00"}, False, "no currency"),
    (MONEY, {"currency": "USD"}, False, "no amount"),
    (MONEY, {"amount": "35.00", "currency": "USD", "note": "x"}, False, "an extra key"),
    (MONEY, "35.00 USD", False, "a string"),
    (MONEY, None, False, "null"),
    (MONEY, [], False, "a list"),
    (MONEY, money("92233720368547758.07"), True, "the largest USD amount"),
    (MONEY, money("-92233720368547758.07"), True, "the smallest USD amount"),
    (MONEY, money("92233720368547758.08"), False, GAP + ", one cent more than the largest"),
    (MONEY, money("9223372036854775807", "JPY"), True, "the largest JPY amount"),
    (MONEY, money("9223372036854775808", "JPY"), False, GAP + ", one yen more"),
    (MONEY, money("1" * 400), False, GAP + ", 400 digits"),
    # -- json
    (JSON, None, True, "null"),
    (JSON, 1.5, True, "a float"),
    (JSON, "x", True, "a string"),
    (JSON, [1, {"a": None}, [True]], True, "nested lists and objects"),
    (JSON, {"amount": 35}, True, "anything, even money-like objects"),
    # -- list
    (list_of(INT), [], True, "empty"),
    (list_of(INT), [1, 2, 3], True, "whole numbers"),
    (list_of(INT), [1.0], True, "a whole float inside"),
    (list_of(INT), [1, "2"], False, "one item of the wrong type"),
    (list_of(INT), [True], False, "a boolean among numbers"),
    (list_of(INT), "1,2", False, "a string"),
    (list_of(INT), {"0": 1}, False, "an object"),
    (list_of(INT), None, False, "null"),
    (list_of(list_of(STR)), [["a"], []], True, "nested lists"),
    (list_of(list_of(STR)), [["a", 1]], False, "a bad item two levels down"),
    (list_of(optional(STR)), [None, "a"], True, "nulls allowed inside"),
    (list_of(MONEY), [money("1"), money("2", "JPY")], True, "money of several currencies"),
    (list_of(MONEY), [money("1.001")], False, "too many decimals inside a list"),
    # -- dict
    (dict_of(MONEY), {}, True, "empty"),
    (dict_of(MONEY), {"a": money("1.50"), "b c": money("2", "JPY")}, True, "money values"),
    (dict_of(MONEY), {"a": money("1.505")}, False, "a bad value"),
    (dict_of(MONEY), [], False, "a list"),
    (dict_of(list_of(DECIMAL)), {"x": ["1.5", 2]}, True, "lists of decimals"),
    (dict_of(list_of(DECIMAL)), {"x": [1.5]}, False, "a float decimal deep inside"),
    # -- optional
    (optional(INT), None, True, "null"),
    (optional(INT), 1, True, "a value"),
    (optional(INT), "1", False, "a wrong value"),
    (optional(MONEY), None, True, "no money"),
    (optional(MONEY), money("1.5"), True, "money"),
    (optional(MONEY), money("1.555"), False, "bad money"),
    (optional(ADDRESS), None, True, "no record"),
    # -- literal
    (COLOUR, "red", True, "one of the values"),
    (COLOUR, "green", False, "another string"),
    (COLOUR, "RED", False, "case matters"),
    (COLOUR, None, False, "null"),
    (SMALL, 1, True, "a number literal"),
    (SMALL, 1.0, True, "1.0 equals 1 in JSON, as enum has it"),
    (SMALL, True, False, "true is not 1"),
    (SMALL, "1", False, "a string of digits is not 1"),
    (SMALL, 3, False, "another number"),
    (YES, True, True, "true"),
    (YES, 1, False, "1 is not true"),
    (YES, False, False, "false"),
    (ZERO_OR_FALSE, 0, True, "zero"),
    (ZERO_OR_FALSE, False, True, "false"),
    (ZERO_OR_FALSE, 0.0, True, "0.0 is 0"),
    (ZERO_OR_FALSE, None, False, "null is neither"),
    # -- record
    (ADDRESS, HOME, True, "the required fields"),
    (ADDRESS, {**HOME, "zip": "12345"}, True, "with an optional field"),
    (ADDRESS, {**HOME, "zip": None}, True, "an optional field that is null"),
    (ADDRESS, {"street": "1 Main St"}, False, "a required field missing"),
    (ADDRESS, {**HOME, "country": "US"}, False, "an unknown field"),
    (ADDRESS, {**HOME, "street": 1}, False, "a field of the wrong type"),
    (ADDRESS, [HOME], False, "a list"),
    (ADDRESS, None, False, "null"),
    (EMPTY_RECORD, {}, True, "a record with no fields"),
    (EMPTY_RECORD, {"a": 1}, False, "a record with no fields and a key"),
    (ORDER, {"lines": [{"sku": "A", "price": money("9.99"), "qty": 2}]}, True, "nested records"),
    (ORDER, {"lines": [], "ship_to": HOME, "note": {"gift": True}}, True, "every field"),
    (ORDER, {"lines": [{"sku": "A", "price": money("9.999")}]}, False, "bad money two deep"),
    (ORDER, {"lines": [{"sku": "A"}]}, False, "a field missing in a nested record"),
    (ORDER, {"lines": [], "ship_to": {**HOME, "x": 1}}, False, "an unknown nested field"),
    (ORDER, {"ship_to": HOME}, False, "the required list missing"),
]
