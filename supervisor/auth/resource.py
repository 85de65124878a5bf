"""The protected resource's URL (issue 24, item 2; RFC 9728 section 3.3,
RFC 8707): the URL clients use, which the metadata's `resource`, the 401's
`resource_metadata` and the `aud` a token must name all are. It is
`server.http.public_url`, or the URL `serve --http` listens at, known only
once it listens (port 0 resolved): `with_resource` writes it into the
manifest's `auth.audience` then, before the authenticator and the guard
(auth.py) are made from it. The manifest check (manifest_auth.py) refused
what it can see without the socket: an audience other than `public_url`,
or one no listening URL can be."""

from __future__ import annotations

from dataclasses import replace

from staal.manifest.addresses import EVERY_INTERFACE, answers_at, listening_url
from staal.manifest.model import Manifest
from staal.supervisor.errors import SupervisorError


class ResourceRefused(SupervisorError):
    """The URL clients use and the audience a token must name cannot agree."""

    kind = "auth"


def with_resource(manifest: Manifest, bound: tuple[str, int]) -> Manifest:
    """The manifest with `auth.audience` the URL clients use, once `serve
    --http` listens at `bound`: the audience it names, which must then be a
    URL this socket answers at unless `server.http.public_url` is set (the
    manifest checked that the two agree); else `public_url`; else the
    listening URL."""
    auth, http = manifest.auth, manifest.server.http
    if auth is None or auth.issuer is None:  # none, or the operator's verifier
        return manifest
    host, port = bound
    listening = listening_url(host, port, http.path)
    if auth.audience is not None:
        if http.public_url is not None or answers_at(auth.audience, host, port):
            return manifest
        raise ResourceRefused(
            f"auth.audience {auth.audience!r} is not the URL this server listens at "
            f"({listening}), and server.http.public_url is not set: clients could not reach "
            "the resource its metadata names; set server.http.public_url to the URL clients "
            "use, or make auth.audience the listening URL (or leave it out)")
    if host in EVERY_INTERFACE:
        raise ResourceRefused(
            f"server.http.public_url is not set and the server listens on every interface "
            f"({listening}), so the URL clients use is not known: set server.http.public_url "
            "(or auth.audience) to it, the resource tokens are issued for")
    return replace(manifest, auth=replace(auth, audience=listening))
