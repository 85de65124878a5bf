"""ISO 4217 currency codes and their minor units.

The active codes of ISO 4217 list one (2025 amendments: ANG withdrawn for
XCG, ZWL for ZWG; HRK, CUC, SLL, VEF and BGN withdrawn). Codes without minor
units (precious metals, XDR, XTS, XXX, bond units) are left out on purpose: an
amount in them cannot be written in minor units, so staal cannot hold one.
"""

from __future__ import annotations

_ZERO = "BIF CLP DJF GNF ISK JPY KMF KRW PYG RWF UGX UYI VND VUV XAF XOF XPF"
_THREE = "BHD IQD JOD KWD LYD OMR TND"
_FOUR = "CLF UYW"
_TWO = """
AED AFN ALL AMD AOA ARS AUD AWG AZN BAM BBD BDT BMD BND BOB BOV BRL BSD BTN
BWP BYN BZD CAD CDF CHE CHF CHW CNY COP COU CRC CUP CVE CZK DKK DOP DZD EGP
ERN ETB EUR FJD FKP GBP GEL GHS GIP GMD GTQ GYD HKD HNL HTG HUF IDR ILS INR
IRR JMD KES KGS KHR KPW KYD KZT LAK LBP LKR LRD LSL MAD MDL MGA MKD MMK MNT
MOP MRU MUR MVR MWK MXN MXV MYR MZN NAD NGN NIO NOK NPR NZD PAB PEN PGK PHP
PKR PLN QAR RON RSD RUB SAR SBD SCR SDG SEK SGD SHP SLE SOS SRD SSP STN SVC
SYP SZL THB TJS TMT TOP TRY TTD TWD TZS UAH USD USN UYU UZS VED VES WST XCD
XCG YER ZAR ZMW ZWG
"""


def _table() -> dict[str, int]:
    table: dict[str, int] = {}
    for exponent, codes in ((0, _ZERO), (2, _TWO), (3, _THREE), (4, _FOUR)):
        for code in codes.split():
            table[code] = exponent
    return table


MINOR_UNITS: dict[str, int] = _table()
