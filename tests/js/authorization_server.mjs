// A real OAuth 2 authorization server for the tests (tests/authorization.py):
// oauth2-mock-server on a free loopback port, one RS256 key, issuing access
// tokens by client credentials.
//
// A client-credentials token names its client as both `sub` and `client_id`.
// The tests reach edge cases through the token request itself, as fields of
// its body: `exp_in` and `nbf_in` (seconds from now, either may be negative)
// and `iss` (a different issuer) are written into the token.
//
// stdout: one JSON line when it listens ({"issuer": ..., "kid": ...}), then one
// per command. stdin: one JSON command per line; {"rotate": true} adds a new
// key, served in the JWKS beside the old, and signs every later token with it.
import { createInterface } from "node:readline";
import { OAuth2Server } from "oauth2-mock-server";

// The client id of HTTP Basic client authentication (RFC 6749 section 2.3.1).
function basicClient(header) {
  const [scheme, encoded] = (header ?? "").split(" ");
  if (scheme?.toLowerCase() !== "basic" || !encoded) return undefined;
  return decodeURIComponent(Buffer.from(encoded, "base64").toString().split(":")[0]);
}

const server = new OAuth2Server();
let signing = await server.issuer.keys.generate("RS256");

server.service.on("beforeTokenSigning", (token, req) => {
  const body = req.body ?? {};
  const client = basicClient(req.headers.authorization) ?? body.client_id;
  const now = Math.floor(Date.now() / 1000);
  token.payload.sub = client;
  token.payload.client_id = client;
  if (body.exp_in !== undefined) token.payload.exp = now + Number(body.exp_in);
  if (body.nbf_in !== undefined) token.payload.nbf = now + Number(body.nbf_in);
  if (body.iss !== undefined) token.payload.iss = body.iss;
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
});
lines.on("close", async () => {
  await server.stop();
  process.exit(0);
});
