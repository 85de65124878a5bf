"""Listening addresses as the operator writes them: `HOST:PORT` or
`[IPv6]:PORT` (port 0: any free one), and whether a host is this machine's
own. The one reading of them, for `serve --http`, the console's `--listen`
and the manifest's `server.metrics.listen`."""

from __future__ import annotations

import ipaddress


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
