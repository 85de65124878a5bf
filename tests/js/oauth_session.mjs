// One MCP session over Streamable HTTP with a TypeScript client's own OAuth
// provider, as tests/clients/test_oauth_typescript.py runs it:
//
//   node oauth_session.mjs < plan.json
//
// The plan: {"sdk": "client" | "sdk1", "url": "<server>", "redirectUrl": ...,
//            "clientId": "<pre-registered id>" (else dynamic registration),
//            "tokens": {...} (a token response to start with), "timeoutMs",
//            "clientCredentials": {"clientId", "clientSecret", "issuer", "scope"}}
//
// "client" is @modelcontextprotocol/client 2.x, "sdk1" @modelcontextprotocol/sdk
// 1.x. The provider keeps its client and tokens in memory; when the client
// sends it to the authorization server, the person's consent is automated: the
// authorize URL is fetched, its 302 read (not followed), and the code handed to
// `transport.finishAuth`, then the client connects again. Connected, it lists
// the tools and calls echo. It prints one JSON object: the tools, the call's
// structured result, each authorize URL's query, the last token response,
// every token response the provider was given (`saved`) and the client id, or
// {"fatal": "...", "saved": [...]}. With "clientCredentials" the provider is the SDK's own
// ClientCredentialsProvider (no person, no redirect), given a scope only if
// the plan names one.

import { readFileSync } from "node:fs";

// The plan comes on stdin, not argv: it may hold a token or a client secret,
// which a command line would show to anyone listing processes.
const plan = JSON.parse(readFileSync(0, "utf8"));
const timeout = plan.timeoutMs ?? 30000;

async function load() {
  if (plan.sdk === "client") {
    const client = await import("@modelcontextprotocol/client");
    return { Client: client.Client, Transport: client.StreamableHTTPClientTransport,
             call: (c, params, options) => c.callTool(params, options),
             ClientCredentials: client.ClientCredentialsProvider };
  }
  const client = await import("@modelcontextprotocol/sdk/client/index.js");
  const http = await import("@modelcontextprotocol/sdk/client/streamableHttp.js");
  const extensions = await import("@modelcontextprotocol/sdk/client/auth-extensions.js");
  return { Client: client.Client, Transport: http.StreamableHTTPClientTransport,
           call: (c, params, options) => c.callTool(params, undefined, options),
           ClientCredentials: extensions.ClientCredentialsProvider };
}

// An OAuthClientProvider (the same interface in both SDKs), in memory.
class Provider {
  constructor() {
    this.client = plan.clientId ? { client_id: plan.clientId, redirect_uris: [plan.redirectUrl] } : undefined;
    this.saved = plan.tokens;
    this.history = [];
    this.asked = [];
    this.pending = undefined;
  }
  get redirectUrl() { return plan.redirectUrl; }
  get clientMetadata() {
    return { client_name: "staal tests", redirect_uris: [plan.redirectUrl], response_types: ["code"],
             grant_types: ["authorization_code", "refresh_token"], token_endpoint_auth_method: "none" };
  }
  state() { return `state-${this.asked.length}`; }
  clientInformation() { return this.client; }
  saveClientInformation(client) { this.client = client; }
  tokens() { return this.saved; }
  saveTokens(tokens) { this.saved = tokens; this.history.push(tokens); }
  redirectToAuthorization(url) {
    this.asked.push(Object.fromEntries(url.searchParams));
    this.pending = url;
  }
  saveCodeVerifier(verifier) { this.verifier = verifier; }
  codeVerifier() { return this.verifier; }
}

// The person consenting: the code from the authorize URL's redirect.
async function consent(url) {
  const answer = await fetch(url, { redirect: "manual" });
  if (answer.status !== 302) throw new Error(`authorize answered ${answer.status}`);
  return new URL(answer.headers.get("location")).searchParams.get("code");
}

// The SDK's client-credentials provider, every token it is given kept in order.
function clientCredentials(ClientCredentials) {
  const { clientId, clientSecret, issuer, scope } = plan.clientCredentials;
  const provider = new ClientCredentials({ clientId, clientSecret, expectedIssuer: issuer,
                                           ...(scope === undefined ? {} : { scope }) });
  provider.asked = [];
  provider.history = [];
  if (plan.tokens) provider.saveTokens(plan.tokens);
  const save = provider.saveTokens.bind(provider);
  provider.saveTokens = (tokens) => { provider.history.push(tokens); save(tokens); };
  return provider;
}

let provider;

async function main() {
  const { Client, Transport, call, ClientCredentials } = await load();
  provider = plan.clientCredentials ? clientCredentials(ClientCredentials) : new Provider();
  const opts = { timeout };
  for (let attempt = 0; attempt < 3; attempt++) {
    const transport = new Transport(new URL(plan.url), { authProvider: provider });
    const client = new Client({ name: "staal-tests", version: "1.0.0" });
    try {
      await client.connect(transport, opts);
      const listed = await client.listTools(undefined, opts);
      const called = await call(client, { name: "echo", arguments: { text: plan.sdk } }, opts);
      await client.close();
      return { tools: listed.tools.map((t) => t.name), result: called.structuredContent ?? null,
               asked: provider.asked, tokens: await provider.tokens(), saved: provider.history,
               clientId: (await provider.clientInformation())?.client_id };
    } catch (err) {
      await client.close().catch(() => {});
      if (provider.pending === undefined) throw err;
      const code = await consent(provider.pending);
      provider.pending = undefined;
      await transport.finishAuth(code);
    }
  }
  throw new Error(`not admitted after 3 authorizations: ${JSON.stringify(provider.asked)}`);
}

main().then(
  (out) => { process.stdout.write(JSON.stringify(out) + "\n"); process.exit(0); },
  (err) => {
    process.stdout.write(JSON.stringify({ fatal: String(err?.stack ?? err), saved: provider?.history }) + "\n");
    process.exit(0);
  },
);
