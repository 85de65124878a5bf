// One MCP session over Streamable HTTP with a TypeScript client's own OAuth
// provider, as tests/test_oauth_typescript.py runs it:
//
//   node oauth_session.mjs '<json plan>'
//
// The plan: {"sdk": "client" | "sdk1", "url": "<server>", "redirectUrl": ...,
//            "clientId": "<pre-registered id>" (else dynamic registration),
//            "tokens": {...} (a token response to start with), "timeoutMs"}
//
// "client" is @modelcontextprotocol/client 2.x, "sdk1" @modelcontextprotocol/sdk
// 1.x. The provider keeps its client and tokens in memory; when the client
// sends it to the authorization server, the person's consent is automated: the
// authorize URL is fetched, its 302 read (not followed), and the code handed to
// `transport.finishAuth`, then the client connects again. Connected, it lists
// the tools and calls echo. It prints one JSON object: the tools, the call's
// structured result, each authorize URL's query, the last token response and
// the registered client id, or {"fatal": "..."}.

const plan = JSON.parse(process.argv[2]);
const timeout = plan.timeoutMs ?? 30000;

async function load() {
  if (plan.sdk === "client") {
    const client = await import("@modelcontextprotocol/client");
    return { Client: client.Client, Transport: client.StreamableHTTPClientTransport,
             call: (c, params, options) => c.callTool(params, options) };
  }
  const client = await import("@modelcontextprotocol/sdk/client/index.js");
  const http = await import("@modelcontextprotocol/sdk/client/streamableHttp.js");
  return { Client: client.Client, Transport: http.StreamableHTTPClientTransport,
           call: (c, params, options) => c.callTool(params, undefined, options) };
}

// An OAuthClientProvider (the same interface in both SDKs), in memory.
class Provider {
  constructor() {
    this.client = plan.clientId ? { client_id: plan.clientId, redirect_uris: [plan.redirectUrl] } : undefined;
    this.saved = plan.tokens;
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
  saveTokens(tokens) { this.saved = tokens; }
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

async function main() {
  const { Client, Transport, call } = await load();
  const provider = new Provider();
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
               asked: provider.asked, tokens: provider.saved, clientId: provider.client?.client_id };
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
  (err) => { process.stdout.write(JSON.stringify({ fatal: String(err?.stack ?? err) }) + "\n"); process.exit(0); },
);
