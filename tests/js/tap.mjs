// A transparent stdio tap between an MCP client and the server it starts:
//
//   node tap.mjs [--hold] LOG_DIR COMMAND ARGS...
//
// Starts COMMAND with piped stdio and passes every byte through unchanged,
// writing what happened to LOG_DIR/<tap pid>.jsonl, one JSON object a line:
//   {"t": ms, "event": "start", "pid": server pid}
//   {"t": ms, "event": "in" | "out" | "err", "line": "..."}  (client->server,
//                                                            server->client, server stderr)
//   {"t": ms, "event": "signal", "signal": "SIGTERM"}        (the tap was signalled)
//   {"t": ms, "event": "exit", "code": n | null, "signal": name | null}
//   {"t": ms, "event": "released", "waited": bool}           (a held probe let go)
//
// The end of the tap's stdin and a signal to the tap are passed on to the
// server at once, and the tap exits when the server has. With --hold, a
// probe (a server that has been sent nothing but server/discover) is held
// instead: its stdin stays open and the tap exits at once on a signal,
// leaving the server running until the next server started through a tap on
// the same LOG_DIR has logged `waiting_for_lock` (that tap writes
// LOG_DIR/waiting_for_lock), then sending it the signal. That is a wrapper
// slow to let go of its server, so the next server started on the same
// journals finds the lock still held: an event, not a delay, so it holds on
// a loaded machine too (bounded by HOLD_BOUND_MS, after which "released"
// says waited: false).

import { spawn } from "node:child_process";
import { appendFileSync, existsSync, mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";

const argv = process.argv.slice(2);

const HOLD_BOUND_MS = 60000;
const LOCK_WAIT = "waiting_for_lock";

if (argv[0] === "--holder") {
  // The helper --hold starts: it keeps the server's stdin open (it was
  // handed the pipe as its own fd 0) until the next server waits for the
  // lock, then signals the server and exits.
  const [, pid, logDir, logPath, signal] = argv;
  const began = Date.now();
  const poll = setInterval(() => {
    const waited = existsSync(join(logDir, LOCK_WAIT));
    if (!waited && Date.now() - began < HOLD_BOUND_MS) return;
    clearInterval(poll);
    appendFileSync(logPath, JSON.stringify({ t: Date.now(), event: "released", waited }) + "\n");
    try { process.kill(Number(pid), signal); } catch {}
    process.exit(0);
  }, 20);
} else {
  main();
}

function main() {
  let hold = false;
  if (argv[0] === "--hold") {
    hold = true;
    argv.splice(0, 1);
  }
  const [logDir, command, ...args] = argv;
  mkdirSync(logDir, { recursive: true });
  const logPath = join(logDir, `${process.pid}.jsonl`);
  const log = (event, fields = {}) =>
    appendFileSync(logPath, JSON.stringify({ t: Date.now(), event, ...fields }) + "\n");

  const child = spawn(command, args, { stdio: ["pipe", "pipe", "pipe"] });
  log("start", { pid: child.pid });

  // Whether every request so far was server/discover: a probe.
  let probe = true;
  const lines = (event, forward) => {
    let pending = "";
    return (chunk) => {
      forward(chunk);
      pending += chunk.toString("utf8");
      let end;
      while ((end = pending.indexOf("\n")) >= 0) {
        const line = pending.slice(0, end);
        pending = pending.slice(end + 1);
        log(event, { line });
        if (event === "in" && line.trim() && !line.includes('"server/discover"')) probe = false;
        if (event === "err" && line.includes(`"${LOCK_WAIT}"`)) writeFileSync(join(logDir, LOCK_WAIT), "");
      }
    };
  };
  const holding = () => hold && probe;
  process.stdin.on("data", lines("in", (chunk) => child.stdin.write(chunk)));
  // Held, the server must not see its client go until the hold is over.
  process.stdin.on("end", () => { if (!holding()) child.stdin.end(); });
  child.stdin.on("error", () => {});
  child.stdout.on("data", lines("out", (chunk) => process.stdout.write(chunk)));
  child.stderr.on("data", lines("err", (chunk) => process.stderr.write(chunk)));
  process.stdout.on("error", () => {});
  process.stderr.on("error", () => {});

  let exited = false;
  child.on("exit", (code, signal) => {
    exited = true;
    log("exit", { code, signal });
    process.exitCode = code ?? 1;
  });
  child.on("close", () => process.exit());

  for (const signal of ["SIGTERM", "SIGINT", "SIGHUP"]) {
    process.on(signal, () => {
      log("signal", { signal });
      if (exited) return process.exit();
      if (holding()) {
        const holder = spawn(process.execPath, [new URL(import.meta.url).pathname, "--holder",
                                                String(child.pid), logDir, logPath, signal],
                             { stdio: [child.stdin, "ignore", "ignore"], detached: true });
        holder.unref();
        log("held", { pid: child.pid });
        process.exit(0);
      }
      child.kill(signal);
    });
  }
}
