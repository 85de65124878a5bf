"""Listening addresses as the operator writes them: `HOST:PORT` or
`[IPv6]:PORT` (port 0: any free one), and whether a host is this machine's
own. The one reading of them, for `serve --http`, the console's `--listen`
and the manifest's `server.metrics.listen`."""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit


def split_host_port(text: str) -> tuple[str, int] | None:
    """(host, port) of `text`, or None when it is not HOST:PORT."""
    host, sep, port = text.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        return None
    return host, int(port)


def is_loopback(host: str) -> bool:
    """Only this machine can reach `host` (a name other than localhost is
    not trusted to be: it could resolve anywhere)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


# Addresses that listen on every interface: clients reach them by names not known here.
EVERY_INTERFACE = ("0.0.0.0", "::")
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")


def url_host(host: str) -> str:
    """`host` as a URL writes it: an IPv6 address in brackets."""
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def listening_url(host: str, port: int, path: str) -> str:
    """The plain-HTTP URL of the endpoint at `path` of a socket bound at
    `host`:`port` (port 80 left out, as a client writes it)."""
    return f"http://{url_host(host)}{'' if port == 80 else f':{port}'}{path}"


def same_url(a: str, b: str) -> bool:
    """Whether `a` and `b` name one resource: scheme and host in any case,
    a default port written or not, a trailing slash or not."""
    def canonical(url: str) -> tuple[str, str | None, int | None, str]:
        parts = urlsplit(url)
        default = {"http": 80, "https": 443}.get(parts.scheme.lower())
        return (parts.scheme.lower(), parts.hostname, parts.port or default,
                parts.path.rstrip("/"))
    return canonical(a) == canonical(b)


def answers_at(url: str, host: str, port: int) -> bool:
    """Whether a plain-HTTP `url` reaches a socket bound at `host`:`port`:
    its port, and its host (any on every interface; a loopback name on
    loopback)."""
    parts = urlsplit(url)
    if parts.scheme != "http" or (parts.port or 80) != port:
        return False
    if host in EVERY_INTERFACE:
        return True
    names = {host, *(LOOPBACK_NAMES if is_loopback(host) else ())}
    return parts.hostname in names
