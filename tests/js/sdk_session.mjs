// One MCP session with a TypeScript SDK client against a stdio server, as
// tests/clients/test_client_typescript.py runs it:
//
//   node sdk_session.mjs < plan.json
//
// The plan: {"sdk": "client" | "sdk1", "mode": "legacy" | "auto" | "<version>",
//            "server": {"command", "args", "cwd", "env"},
//            "echo": {"name", "good": {...}, "bad": {...}},
//            "refuse": {"name", "arguments": {...}}, "unknown": "<tool name>",
//            "resourceBase": "staal://<server name>", "timeoutMs": 30000}
//
// With "url" in place of "server", the session is over Streamable HTTP to a
// server already listening there.
//
// "client" is @modelcontextprotocol/client 2.x (mode legacy, auto, or a pinned
// version), "sdk1" @modelcontextprotocol/sdk 1.x (2025-11-25 only; mode must be
// legacy). It connects, lists the tools, calls the echo tool with good
// arguments (asking for progress), then with arguments the program's types
// refuse, calls the refusing tool and an unknown tool, and asks
// staal_run_status about the first call's run; with "resourceBase", lists the
// resource templates and reads that run as a resource, and an unknown run. It prints one JSON object on
// stdout: what each step gave, or {"fatal": "..."} if the session broke.
// The server's stderr is collected into "serverStderr".

import { readFileSync } from "node:fs";

// The plan comes on stdin, not argv: it may hold a token or a client secret,
// which a command line would show to anyone listing processes.
const plan = JSON.parse(readFileSync(0, "utf8"));
const timeout = plan.timeoutMs ?? 30000;

async function load() {
  if (plan.sdk === "client") {
    const client = await import("@modelcontextprotocol/client");
    const stdio = await import("@modelcontextprotocol/client/stdio");
    const pkg = await packageVersion("@modelcontextprotocol/client");
    // 2.x: callTool(params, options).
    const call = (c, params, options) => c.callTool(params, options);
    return { Client: client.Client, StdioClientTransport: stdio.StdioClientTransport, pkg, call,
             HttpTransport: client.StreamableHTTPClientTransport };
  }
  if (plan.sdk === "sdk1") {
    const client = await import("@modelcontextprotocol/sdk/client/index.js");
    const stdio = await import("@modelcontextprotocol/sdk/client/stdio.js");
    const pkg = await packageVersion("@modelcontextprotocol/sdk");
    // 1.x: callTool(params, resultSchema, options).
    const call = (c, params, options) => c.callTool(params, undefined, options);
    const http = await import("@modelcontextprotocol/sdk/client/streamableHttp.js");
    return { Client: client.Client, StdioClientTransport: stdio.StdioClientTransport, pkg, call,
             HttpTransport: http.StreamableHTTPClientTransport };
  }
  throw new Error(`unknown sdk ${plan.sdk}`);
}

async function packageVersion(name) {
  // The installed version, read next to this script (the lock file pins it).
  const url = new URL(`./node_modules/${name}/package.json`, import.meta.url);
  return JSON.parse(readFileSync(url, "utf8")).version;
}

function negotiationOptions() {
  if (plan.sdk !== "client" || plan.mode === "legacy") {
    // No option at all: the default, a plain 2025-11-25 initialize.
    return {};
  }
  const mode = plan.mode === "auto" ? "auto" : { pin: plan.mode };
  return { versionNegotiation: { mode, probe: { timeoutMs: timeout } } };
}

function errorOf(err) {
  return { code: typeof err?.code === "number" ? err.code : null, message: String(err?.message ?? err) };
}

function resultOf(result) {
  return {
    isError: result.isError ?? false,
    structuredContent: result.structuredContent ?? null,
    text: (result.content ?? []).filter((c) => c.type === "text").map((c) => c.text),
    resultType: result.resultType ?? null,
    meta: result._meta ?? null,
  };
}

const STDERR_END_MS = 10000;

// Whether `stream` ended (all its data read) within `ms`.
function ended(stream, ms) {
  if (stream.readableEnded) return Promise.resolve(true);
  return new Promise((resolve) => {
    const timer = setTimeout(() => resolve(false), ms);
    stream.once("end", () => { clearTimeout(timer); resolve(true); });
  });
}

async function main() {
  const { Client, StdioClientTransport, pkg, call, HttpTransport } = await load();
  const out = { sdk: plan.sdk, package: pkg, mode: plan.mode, steps: [] };
  const stderr = [];
  // `headers` (over HTTP): sent with every request, as a bearer token is.
  const init = plan.headers ? { requestInit: { headers: plan.headers } } : undefined;
  const transport = plan.url ? new HttpTransport(new URL(plan.url), init) : new StdioClientTransport({
    command: plan.server.command,
    args: plan.server.args ?? [],
    cwd: plan.server.cwd,
    env: plan.server.env,
    stderr: "pipe",
  });
  transport.stderr?.on("data", (chunk) => stderr.push(chunk.toString()));
  const client = new Client({ name: "staal-tests", version: "1.0.0" }, negotiationOptions());
  const step = (name) => out.steps.push(name);
  const opts = { timeout };
  // The SDK runs notification handlers a microtask late, so a progress
  // notification read in the same chunk as its call's answer finds its
  // handler gone and is reported here instead (with the notification's JSON).
  out.lateProgress = [];
  client.onerror = (err) => {
    const found = /progress notification for an unknown token: (.*)$/.exec(String(err?.message ?? ""));
    if (found) out.lateProgress.push(JSON.parse(found[1]).params);
  };
  try {
    step("connect");
    await client.connect(transport, opts);
    out.protocolVersion = client.getNegotiatedProtocolVersion?.() ?? null;
    out.serverVersion = client.getServerVersion() ?? null;
    out.serverPid = transport.pid ?? null;

    step("listTools");
    const listed = await client.listTools(undefined, opts);
    out.tools = listed.tools.map((t) => ({ name: t.name, title: t.title ?? null, annotations: t.annotations ?? null,
                                          inputSchema: t.inputSchema }));
    out.listMeta = { resultType: listed.resultType ?? null, ttlMs: listed.ttlMs ?? null,
                     cacheScope: listed.cacheScope ?? null, meta: listed._meta ?? null };

    step("callGood");
    const progress = [];
    const good = await call(client, { name: plan.echo.name, arguments: plan.echo.good },
                                 { ...opts, onprogress: (p) => progress.push(p) });
    out.good = resultOf(good);
    out.progress = progress;

    step("callBadArguments");
    out.badArguments = resultOf(await call(client, { name: plan.echo.name, arguments: plan.echo.bad }, opts));

    step("callRefusing");
    out.refused = resultOf(await call(client, { name: plan.refuse.name, arguments: plan.refuse.arguments },
                                      opts));

    step("callUnknown");
    try {
      const answer = await call(client, { name: plan.unknown, arguments: {} }, opts);
      out.unknown = { answered: resultOf(answer) };
    } catch (err) {
      out.unknown = { error: errorOf(err) };
    }

    // The run's first notification may have reached onerror instead (read
    // with the answer; see lateProgress): look for its id in both.
    const run = [...progress, ...out.lateProgress]
      .map((p) => /run ([0-9a-f]{32}) started/.exec(p.message ?? "")?.[1]).find(Boolean);
    if (run) {
      step("runStatus");
      out.runStatus = resultOf(await call(client, { name: "staal_run_status", arguments: { run } }, opts));
    }
    if (run && plan.resourceBase) {
      step("listResourceTemplates");
      const templates = await client.listResourceTemplates(undefined, opts);
      out.resourceTemplates = templates.resourceTemplates.map((t) => t.uriTemplate);
      step("readRunResource");
      const read = await client.readResource({ uri: `${plan.resourceBase}/runs/${run}` }, opts);
      out.runResource = { contents: read.contents, ttlMs: read.ttlMs ?? null,
                          cacheScope: read.cacheScope ?? null };
      step("readUnknownResource");
      try {
        await client.readResource({ uri: `${plan.resourceBase}/runs/${"0".repeat(32)}` }, opts);
        out.unknownResource = { answered: true };
      } catch (err) {
        out.unknownResource = { error: errorOf(err) };
      }
    }
    step("close");
    await client.close();
    step("closed");
  } catch (err) {
    out.fatal = errorOf(err);
    out.fatal.stack = err?.stack ?? null;
    try { await client.close(); } catch {}
  }
  // The server's last stderr lines: its stderr ends once it has exited (the
  // transport's close waits for that, or kills it); bounded, in case it does not.
  if (transport.stderr) out.serverStderrEnded = await ended(transport.stderr, STDERR_END_MS);
  out.serverStderr = stderr.join("");
  process.stdout.write(JSON.stringify(out) + "\n");
}

main().catch((err) => {
  process.stdout.write(JSON.stringify({ fatal: errorOf(err) }) + "\n");
  process.exitCode = 1;
});
