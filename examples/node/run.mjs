#!/usr/bin/env node
// Run one fleet agent job from Node.js, speaking fleet protocol v1
// (docs/PROTOCOL.md) with the `nats` npm package and nothing else.
//
//   node run.mjs --operation lint --file src/app.py [--node load] [--server nats://127.0.0.1:4222]
//
// It first checks that a worker serves the operation (§9.1: the durable
// consumer named after it exists on FLEET_RUNS), then publishes a JSON
// RunRequest for the file to agents.run.<operation>
// through JetStream (headers Nats-Msg-Id, Content-Type, Fleet-Protocol),
// then reads the job's stored events (agents.events.<job_id>) and its result
// (agents.results.<job_id>) from stream FLEET_RESULTS with an ordered
// consumer, and prints one JSON object per line on stdout:
//
//   {"type":"queued","job_id":"...","stream":"FLEET_RUNS","seq":1,"duplicate":false}
//   {"type":"event","subject":"agents.events.<id>","event":{...the Event...}}
//   {"type":"result","subject":"agents.results.<id>","result":{...the AgentResult...}}
//
// Exit status: 0 when a result arrived (whatever its state), 1 on timeout,
// 2 on bad usage (an operation no worker serves included) or a
// connection/publish error.

import { readFileSync } from "node:fs";
import { basename, relative, sep } from "node:path";
import { randomUUID } from "node:crypto";
import { parseArgs } from "node:util";
import { connect, headers } from "nats";

const usage = `usage: node run.mjs --operation OP --file PATH [options]

  --operation OP    agent operation (subject agents.run.OP), e.g. lint
  --file PATH       source file to send; it becomes the node (unless --node) and the workspace
  --node NAME       name of the function or class the agent works on (default: the whole file)
  --server URL      NATS server (default $NATS_URL or nats://127.0.0.1:4222)
  --job-id ID       job id (default node-<uuid>); republishing the same id is deduplicated
  --max-turns N     options.max_turns (default: the worker's)
  --timeout SEC     give up after SEC seconds without a result (default 120)
  --help            this text`;

function fail(code, msg) {
  process.stderr.write(`run.mjs: ${msg}\n`);
  process.exit(code);
}

let args;
try {
  ({ values: args } = parseArgs({
    options: {
      operation: { type: "string" },
      file: { type: "string" },
      node: { type: "string" },
      server: { type: "string", default: process.env.NATS_URL || "nats://127.0.0.1:4222" },
      "job-id": { type: "string" },
      "max-turns": { type: "string" },
      timeout: { type: "string", default: "120" },
      help: { type: "boolean", default: false },
    },
    strict: true,
  }));
} catch (err) {
  fail(2, `${err.message}\n${usage}`);
}
if (args.help) {
  process.stdout.write(usage + "\n");
  process.exit(0);
}

// Protocol §2 and §5: operation [a-z0-9_-], 1-64, not starting with - or _;
// job id [A-Za-z0-9_-], 1-128.
const operation = args.operation ?? "";
if (!/^[a-z0-9][a-z0-9_-]{0,63}$/.test(operation)) {
  fail(2, `--operation must be 1-64 characters of [a-z0-9_-], not starting with - or _ (got ${JSON.stringify(operation)})\n${usage}`);
}
if (!args.file) {
  fail(2, `--file is required\n${usage}`);
}
const jobId = args["job-id"] ?? `node-${randomUUID()}`;
if (!/^[A-Za-z0-9_-]{1,128}$/.test(jobId)) {
  fail(2, `--job-id must be 1-128 characters of [A-Za-z0-9_-] (got ${JSON.stringify(jobId)})`);
}
const timeoutSec = Number(args.timeout);
if (!(timeoutSec > 0)) {
  fail(2, `--timeout must be a positive number of seconds (got ${JSON.stringify(args.timeout)})`);
}
let maxTurns;
if (args["max-turns"] !== undefined) {
  maxTurns = Number(args["max-turns"]);
  if (!Number.isInteger(maxTurns) || maxTurns < 0 || maxTurns > 1000) {
    fail(2, `--max-turns must be an integer 0-1000 (got ${JSON.stringify(args["max-turns"])})`);
  }
}

let text;
try {
  text = readFileSync(args.file, "utf8");
} catch (err) {
  fail(2, `cannot read ${args.file}: ${err.message}`);
}

// The workspace path: relative, '/'-separated, clean (§5). A file outside
// the current folder is sent under its base name.
let filePath = relative(process.cwd(), args.file);
if (filePath === "" || filePath.startsWith("..") || filePath.startsWith(sep)) {
  filePath = basename(args.file);
}
filePath = filePath.split(sep).join("/");

const node = args.node
  ? { id: `${filePath}::${args.node}`, name: args.node, type: "function", file_path: filePath, text }
  : { id: filePath, name: basename(filePath), type: "file", file_path: filePath, text };
const request = {
  version: 1,
  job_id: jobId,
  operation,
  node,
  files: { [filePath]: text },
  options: maxTurns !== undefined ? { max_turns: maxTurns } : {},
  created_at: new Date().toISOString(),
};

const print = (obj) => process.stdout.write(JSON.stringify(obj) + "\n");
const enc = new TextEncoder();
const dec = new TextDecoder();

let nc;
try {
  nc = await connect({ servers: args.server.split(","), name: "fleet-example-node" });
} catch (err) {
  fail(2, `cannot connect to ${args.server}: ${err.message}`);
}

let exitCode = 1;
const timer = setTimeout(() => {
  process.stderr.write(`run.mjs: no result for job ${jobId} within ${timeoutSec}s\n`);
  nc.close().finally(() => process.exit(1));
}, timeoutSec * 1000);

try {
  // §9.1: a request for an operation without a consumer would wait in
  // FLEET_RUNS until a worker dead-letters it (QUEUE_002); refuse it here.
  const jsm = await nc.jetstreamManager();
  try {
    await jsm.consumers.info("FLEET_RUNS", operation);
  } catch (err) {
    const api = err.api_error;
    if (api && api.err_code === 10014) {
      throw new Error(`no worker serves operation ${JSON.stringify(operation)} on ${args.server}`);
    }
    if (api && api.err_code === 10059) {
      throw new Error(`the fleet streams do not exist on ${args.server} (start a worker first)`);
    }
    throw err;
  }
  const js = nc.jetstream();

  // §4: the job id is the dedupe key; JSON body; protocol version 1.
  const h = headers();
  h.set("Nats-Msg-Id", jobId);
  h.set("Content-Type", "application/json");
  h.set("Fleet-Protocol", "1");
  const ack = await js.publish(`agents.run.${operation}`, enc.encode(JSON.stringify(request)), { headers: h });
  print({ type: "queued", job_id: jobId, stream: ack.stream, seq: ack.seq, duplicate: ack.duplicate });

  // §3, §7: events and the result are stored in FLEET_RESULTS; an ordered
  // consumer reads them from the start (the ordered consumer's default is
  // every stored message), in stream order: all events are stored before
  // the result. The two filters leave out the job's lease records (1.2),
  // which the stream holds too.
  const consumer = await js.consumers.get("FLEET_RESULTS", {
    filterSubjects: [`agents.events.${jobId}`, `agents.results.${jobId}`],
  });
  const messages = await consumer.consume();
  for await (const m of messages) {
    const body = JSON.parse(dec.decode(m.data));
    if (m.subject.startsWith("agents.events.")) {
      print({ type: "event", subject: m.subject, event: body });
    } else {
      print({ type: "result", subject: m.subject, result: body });
      exitCode = 0;
      break;
    }
  }
} catch (err) {
  if (!nc.isClosed()) {
    process.stderr.write(`run.mjs: ${err.message}\n`);
    exitCode = 2;
  }
} finally {
  clearTimeout(timer);
  if (!nc.isClosed()) {
    await nc.close();
  }
}
process.exit(exitCode);
