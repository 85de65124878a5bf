// A real OAuth 2 authorization server for the tests (tests/helpers/authorization.py):
// oauth2-mock-server on a free loopback port, one RS256 key, issuing access
// tokens by client credentials, authorization code + PKCE and refresh token,
// to clients registered in advance (any client id) or dynamically.
//
// What the library leaves out and a real server does, added through its
// hooks: the RFC 8707 `resource` becomes the token's `aud` (client
// credentials: the token request's; authorization code: the token request's,
// else the one given at /authorize; refresh: the token request's, else the
// grant's); the scope authorized at /authorize is the code's token's scope and
// stays the grant's through every refresh (a refresh may ask for less, never
// more); a code and a refresh token are each used once (a refresh rotates it);
// RFC 7591 dynamic registration at /register, advertised in the metadata as
// `registration_endpoint`, and a registered client with a secret must present
// it (client_secret_basic or client_secret_post).
//
// A token names its client as both `sub` and `client_id`. The tests reach
// edge cases through the token request itself, as fields of its body:
// `exp_in` and `nbf_in` (seconds from now, either may be negative), `iss` (a
// different issuer) and `aud` are written into the token.
//
// argv: `--token-ttl N` makes every access token live N seconds (default 3600).
// stdout: one JSON line when it listens ({"issuer": ..., "kid": ...}), then one
// per command. stdin: one JSON command per line; {"rotate": true} adds a new
// key, served in the JWKS beside the old, and signs every later token with it;
// {"issued": true} answers {"issued": [{grant_type, client_id, scope, aud}, ...]},
// every access token issued so far; {"expire": {client_id, grant_type, by}}
// makes the next access token that grant gives that client one that expired
// `by` seconds ago (its `exp` and the response's `expires_in`), as a token
// outlived by its client (a laptop asleep past its lifetime) reaches the
// resource server, and answers {"expire": ...}.
import { randomBytes, randomUUID } from "node:crypto";
import { createInterface } from "node:readline";
import { OAuth2Server } from "oauth2-mock-server";

const ttlAt = process.argv.indexOf("--token-ttl");
const tokenTtl = ttlAt === -1 ? undefined : Number(process.argv[ttlAt + 1]);

// Clients registered at /register, by client id; any other client id is
// taken as registered in advance, as a public client.
const clients = new Map();
// What an authorization code, then a refresh token, was granted for:
// {client, scope, resource, redirectUri}.
const codes = new Map();
const refreshes = new Map();
const issued = [];
// What {"expire": ...} asked for, by `${client_id} ${grant_type}`: seconds ago.
const expiring = new Map();

// The client id and secret of HTTP Basic client authentication (RFC 6749 section 2.3.1).
function basicClient(header) {
  const [scheme, encoded] = (header ?? "").split(" ");
  if (scheme?.toLowerCase() !== "basic" || !encoded) return undefined;
  const [id, secret] = Buffer.from(encoded, "base64").toString().split(":");
  return { id: decodeURIComponent(id), secret: secret && decodeURIComponent(secret) };
}

function words(scope) {
  return (scope ?? "").split(" ").filter(Boolean);
}

// The refusal a token request gets, or undefined; `grant` is what the request
// stands on (its code's or refresh token's grant, or its own for client
// credentials).
function refusal(body, client, grant) {
  const registered = clients.get(client.id);
  if (registered?.client_secret !== undefined && registered.client_secret !== client.secret) {
    return { status: 401, error: "invalid_client", why: "the client's secret is wrong or missing" };
  }
  if (grant === undefined) return { status: 400, error: "invalid_grant", why: "unknown or used code or refresh token" };
  if (grant.client !== client.id) return { status: 400, error: "invalid_grant", why: "granted to another client" };
  if (body.grant_type === "authorization_code" && body.redirect_uri !== grant.redirectUri) {
    return { status: 400, error: "invalid_grant", why: "redirect_uri differs from the authorization request's" };
  }
  // The library checks a code_verifier only when one is sent.
  if (body.grant_type === "authorization_code" && grant.pkce && body.code_verifier === undefined) {
    return { status: 400, error: "invalid_grant", why: "the code was issued with a code_challenge: code_verifier is required" };
  }
  // Against what the grant was for, not the scope this refresh is given.
  const wider = words(body.scope).filter((s) => !words(grant.granted ?? grant.scope).includes(s));
  if (body.grant_type === "refresh_token" && wider.length) {
    return { status: 400, error: "invalid_scope", why: `not granted: ${wider.join(" ")}` };
  }
  return undefined;
}

// What a token request is granted: its client, scope and audience.
function grantOf(body, client) {
  if (body.grant_type === "authorization_code") {
    const grant = codes.get(body.code);
    codes.delete(body.code);
    return grant && { ...grant, resource: body.resource ?? grant.resource };
  }
  if (body.grant_type === "refresh_token") {
    const grant = refreshes.get(body.refresh_token);
    refreshes.delete(body.refresh_token);
    // `granted`: the scope authorized at first, which no refresh widens.
    return grant && { ...grant, granted: grant.granted ?? grant.scope,
                      scope: body.scope ?? grant.scope, resource: body.resource ?? grant.resource };
  }
  return { client: client.id, scope: body.scope, resource: body.aud ?? body.resource };
}

const server = new OAuth2Server();
let signing = await server.issuer.keys.generate("RS256");

server.service.on("beforeAuthorizeRedirect", ({ url }, req) => {
  const code = url.searchParams.get("code");
  if (code === null) return;
  const { client_id: client, scope, resource, redirect_uri: redirectUri, code_challenge } = req.query;
  codes.set(code, { client, scope, resource, redirectUri, pkce: code_challenge !== undefined });
});

server.service.on("beforeTokenSigning", (token, req) => {
  const body = req.body ?? {};
  // A token request builds its access token first, then (for a code or a
  // refresh) an ID token, which keeps the library's own claims.
  if (req.staal !== undefined) {
    token.payload.sub = req.staal.grant?.client;
    return;
  }
  const basic = basicClient(req.headers.authorization);
  const client = { id: basic?.id ?? body.client_id, secret: basic?.secret ?? body.client_secret };
  const grant = grantOf(body, client);
  req.staal = { grant, refused: refusal(body, client, grant) };
  const now = Math.floor(Date.now() / 1000);
  const payload = token.payload;
  payload.sub = client.id;
  payload.client_id = client.id;
  if (grant?.scope !== undefined) payload.scope = grant.scope;
  else delete payload.scope;
  if (grant?.resource !== undefined) payload.aud = grant.resource;
  if (tokenTtl !== undefined) payload.exp = now + tokenTtl;
  if (body.exp_in !== undefined) payload.exp = now + Number(body.exp_in);
  const expiredBy = expiring.get(`${client.id} ${body.grant_type}`);
  if (expiredBy !== undefined && req.staal.refused === undefined) {
    expiring.delete(`${client.id} ${body.grant_type}`);
    payload.exp = now - expiredBy;
    req.staal.expiresIn = -expiredBy;
  }
  if (body.nbf_in !== undefined) payload.nbf = now + Number(body.nbf_in);
  if (body.iss !== undefined) payload.iss = body.iss;
});

server.service.on("beforeResponse", (response, req) => {
  const { grant, refused } = req.staal;
  if (refused !== undefined) {
    response.statusCode = refused.status;
    response.body = { error: refused.error, error_description: refused.why };
    return;
  }
  if (grant.scope === undefined) delete response.body.scope;
  else response.body.scope = grant.scope;
  if (tokenTtl !== undefined) response.body.expires_in = tokenTtl;
  if (req.staal.expiresIn !== undefined) response.body.expires_in = req.staal.expiresIn;
  if (response.body.refresh_token !== undefined) refreshes.set(response.body.refresh_token, grant);
  issued.push({ grant_type: req.body.grant_type, client_id: grant.client,
                scope: grant.scope ?? null, aud: grant.resource ?? null });
});

server.service.on("beforeWellKnownOpenIdConfiguration", (response) => {
  const issuer = server.issuer.url;
  Object.assign(response.body, {
    registration_endpoint: `${issuer}/register`,
    token_endpoint_auth_methods_supported: ["none", "client_secret_basic", "client_secret_post"],
    grant_types_supported: [...response.body.grant_types_supported, "refresh_token"],
  });
});

// RFC 7591: a client registers its metadata and is given an id (and a secret
// unless it authenticates with none).
server.service.addRoute("POST", "/register", (req, res) => {
  const metadata = req.body ?? {};
  const answer = (status, body) => {
    res.statusCode = status;
    res.setHeader("Content-Type", "application/json");
    res.setHeader("Cache-Control", "no-store");
    res.end(JSON.stringify(body));
  };
  if (!Array.isArray(metadata.redirect_uris) && !(metadata.grant_types ?? []).every((g) => g === "client_credentials")) {
    answer(400, { error: "invalid_redirect_uri", error_description: "redirect_uris is required" });
    return;
  }
  const method = metadata.token_endpoint_auth_method ?? "client_secret_basic";
  const client = {
    ...metadata,
    client_id: randomUUID(),
    client_id_issued_at: Math.floor(Date.now() / 1000),
    token_endpoint_auth_method: method,
    ...(method === "none" ? {} : { client_secret: randomBytes(24).toString("base64url"), client_secret_expires_at: 0 }),
  };
  clients.set(client.client_id, client);
  answer(201, client);
});

// The store hands out its keys in turn: each token is signed with the
// newest key instead.
const originalBuild = server.issuer.buildToken.bind(server.issuer);
server.issuer.buildToken = async (opts) => originalBuild({ ...opts, kid: signing.kid });

// argv: `--port N` listens on port N (docs/operators.md's local recipe); else a free one.
const portAt = process.argv.indexOf("--port");
await server.start(portAt === -1 ? 0 : Number(process.argv[portAt + 1]), "127.0.0.1");
const say = (message) => process.stdout.write(JSON.stringify(message) + "\n");
say({ issuer: server.issuer.url, kid: signing.kid });

const lines = createInterface({ input: process.stdin });
lines.on("line", async (line) => {
  const command = JSON.parse(line);
  if (command.rotate) {
    signing = await server.issuer.keys.generate("RS256");
    say({ kid: signing.kid });
  }
  if (command.issued) say({ issued });
  if (command.expire) {
    const { client_id: client, grant_type: grantType, by } = command.expire;
    expiring.set(`${client} ${grantType}`, Number(by));
    say({ expire: command.expire });
  }
});
lines.on("close", async () => {
  await server.stop();
  process.exit(0);
});
