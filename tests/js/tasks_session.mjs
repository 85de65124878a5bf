// One MCP 2025-11-25 tasks session with @modelcontextprotocol/sdk 1.x's
// experimental tasks client against a stdio server, as
// tests/clients/test_tasks_typescript.py runs it:
//
//   node tasks_session.mjs < plan.json
//
// The plan: {"server": {"command", "args", "cwd", "env"},
//            "tool": "<name>", "arguments": {...}, "timeoutMs": 30000}
//
// It connects, lists the tools, calls the tool as a task with
// callToolStream (which creates the task, then polls tasks/get until it
// ends and fetches tasks/result), then asks tasks/get, tasks/list and
// tasks/result again, and cancels the ended task. It prints one JSON object
// on stdout: what each step gave, or {"fatal": "..."}.

import { readFileSync } from "node:fs";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { CallToolResultSchema } from "@modelcontextprotocol/sdk/types.js";

const plan = JSON.parse(readFileSync(0, "utf8"));
const timeout = plan.timeoutMs ?? 30000;
const out = { steps: [] };
let stderr = "";

async function main() {
  const transport = new StdioClientTransport({ ...plan.server, stderr: "pipe" });
  transport.stderr?.on("data", (chunk) => { stderr += chunk; });
  const client = new Client({ name: "staal-tasks-test", version: "1.0.0" });
  await client.connect(transport, { timeout });
  out.capabilities = client.getServerCapabilities();
  out.tools = (await client.listTools(undefined, { timeout })).tools;
  out.steps.push("listed");
  out.stream = [];
  const stream = client.experimental.tasks.callToolStream(
    { name: plan.tool, arguments: plan.arguments }, CallToolResultSchema,
    { timeout, task: { ttl: 60000 } });
  for await (const message of stream) {
    out.stream.push(message.type === "error"
      ? { type: "error", error: String(message.error) } : message);
  }
  out.steps.push("streamed");
  const created = out.stream.find((m) => m.type === "taskCreated");
  const taskId = created?.task?.taskId;
  out.got = await client.experimental.tasks.getTask(taskId, { timeout });
  out.listed = await client.experimental.tasks.listTasks(undefined, { timeout });
  out.result = await client.experimental.tasks.getTaskResult(taskId, CallToolResultSchema, { timeout });
  try {
    await client.experimental.tasks.cancelTask(taskId, { timeout });
    out.cancel = "accepted";
  } catch (error) {
    out.cancel = { code: error.code, message: error.message };
  }
  out.steps.push("fetched");
  await client.close();
  out.steps.push("closed");
}

main().then(
  () => { out.serverStderr = stderr; console.log(JSON.stringify(out)); },
  (error) => { console.log(JSON.stringify({ ...out, fatal: String(error?.stack ?? error), serverStderr: stderr })); },
);
