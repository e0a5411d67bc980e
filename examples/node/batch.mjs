#!/usr/bin/env node
// Publish a fleet batch from Node.js and follow it to the end, speaking
// fleet protocol v1.11 (docs/PROTOCOL.md §21) with the `nats` npm package.
//
//   node batch.mjs --operation lint --file a.py --file b.py [--server nats://127.0.0.1:4222]
//
// One job per file and operation, under one batch id:
//   1. every operation is served (its consumer exists on FLEET_RUNS);
//   2. the batch record is created in the fleet_batches bucket (a used id is refused);
//   3. the job index goes on agents.batch.<batch>.jobs;
//   4. each RunRequest goes on agents.run.<operation>, job id "<batch>-<n>",
//      the batch id in the body and in the Fleet-Batch header;
//   5. the record is marked published (compare-and-set on its revision);
//   6. the counts come from one stream info over the batch's tally subjects,
//      read until every job has its result.
//
// Prints one JSON object per line: {"type":"published",...}, then
// {"type":"status",...} whenever the counts change. Exit status: 0 when
// every job succeeded, 1 when one did not or on timeout, 2 on bad usage, an
// operation no worker serves, or a connection error.

import { readFileSync } from "node:fs";
import { basename, relative, sep } from "node:path";
import { randomBytes } from "node:crypto";
import { parseArgs } from "node:util";
import { connect, headers } from "nats";

function fail(code, msg) {
  process.stderr.write(`batch.mjs: ${msg}\n`);
  process.exit(code);
}

let args;
try {
  ({ values: args } = parseArgs({
    options: {
      operation: { type: "string", multiple: true },
      file: { type: "string", multiple: true },
      server: { type: "string", default: process.env.NATS_URL || "nats://127.0.0.1:4222" },
      "batch-id": { type: "string" },
      label: { type: "string", multiple: true, default: [] },
      timeout: { type: "string", default: "120" },
    },
    strict: true,
  }));
} catch (err) {
  fail(2, err.message);
}
const ops = [...new Set(args.operation ?? [])];
if (ops.length === 0 || !args.file?.length) {
  fail(2, "want --operation OP (repeatable) and --file PATH (repeatable)");
}
for (const op of ops) {
  if (!/^[a-z0-9][a-z0-9_-]{0,63}$/.test(op)) fail(2, `bad operation ${JSON.stringify(op)}`);
}
const batch = args["batch-id"] ?? `node-${randomBytes(6).toString("hex")}`;
if (!/^[A-Za-z0-9_-]{1,64}$/.test(batch)) fail(2, `bad batch id ${JSON.stringify(batch)}`);
const labels = {};
for (const l of args.label) {
  const i = l.indexOf("=");
  if (i < 1 || !/^[A-Za-z0-9_.-]{1,64}$/.test(l.slice(0, i))) fail(2, `bad label ${JSON.stringify(l)}: want key=value`);
  labels[l.slice(0, i)] = l.slice(i + 1);
}
const timeoutMs = Number(args.timeout) * 1000;

const now = () => new Date().toISOString();
const emit = (o) => process.stdout.write(JSON.stringify(o) + "\n");
const enc = (o) => new TextEncoder().encode(JSON.stringify(o));

let nc;
try {
  nc = await connect({ servers: args.server, name: "fleet-example-node-batch", timeout: 5000 });
} catch (err) {
  fail(2, `connect ${args.server}: ${err.message}`);
}
try {
  process.exitCode = await run();
} catch (err) {
  process.stderr.write(`batch.mjs: ${err.message}\n`);
  process.exitCode = 2;
} finally {
  await nc.close();
}

async function run() {
  const jsm = await nc.jetstreamManager();
  const js = nc.jetstream();
  // 1. Served (§9.1).
  for (const op of ops) {
    try {
      await jsm.consumers.info("FLEET_RUNS", op);
    } catch (err) {
      process.stderr.write(`batch.mjs: no worker serves ${op}: ${err.message}\n`);
      return 2;
    }
  }
  const files = args.file.map((p) => ({ path: relative(process.cwd(), p).split(sep).join("/"), text: readFileSync(p, "utf8") }));
  const jobs = [];
  const reqs = [];
  for (const op of ops) {
    for (const f of files) {
      const n = jobs.length + 1;
      const jobId = `${batch}-${n}`;
      const node = { id: f.path, name: basename(f.path), type: "file", file_path: f.path, text: f.text };
      jobs.push({ n, job_id: jobId, operation: op, node_id: node.id, node_name: node.name, node_type: "file", file_path: f.path });
      reqs.push({ op, jobId, body: { version: 1, job_id: jobId, operation: op, batch, labels, node, files: { [f.path]: f.text }, options: {}, created_at: now() } });
    }
  }
  const plannedByOp = Object.fromEntries(ops.map((op) => [op, files.length]));
  const record = { version: 1, batch_id: batch, operations: ops, labels, planned: reqs.length, planned_by_op: plannedByOp,
    published: 0, state: "publishing", publisher: "batch.mjs", created_at: now(), updated_at: now() };
  // 2. The record, created (a used batch id is refused).
  const kv = await js.views.kv("fleet_batches", { bindOnly: true });
  let rev;
  try {
    rev = await kv.create(batch, enc(record));
  } catch (err) {
    process.stderr.write(`batch.mjs: batch ${batch} exists or cannot be recorded: ${err.message}\n`);
    return 2;
  }
  // 3. The index, up to 500 jobs a message.
  for (let i = 0; i < jobs.length; i += 500) {
    await js.publish(`agents.batch.${batch}.jobs`, enc({ batch_id: batch, jobs: jobs.slice(i, i + 500) }), { msgID: `${batch}-jobs-${i / 500}` });
  }
  // 4. The requests.
  const publishedByOp = Object.fromEntries(ops.map((op) => [op, 0]));
  for (const r of reqs) {
    const h = headers();
    h.set("Content-Type", "application/json");
    h.set("Fleet-Protocol", "1");
    h.set("Fleet-Batch", batch);
    h.set("Fleet-Events", "finished");
    await js.publish(`agents.run.${r.op}`, enc(r.body), { msgID: r.jobId, headers: h });
    publishedByOp[r.op]++;
  }
  // 5. The record, published.
  Object.assign(record, { published: reqs.length, published_by_op: publishedByOp, state: "published", published_at: now(), updated_at: now() });
  await kv.update(batch, enc(record), rev);
  emit({ type: "published", batch_id: batch, jobs: reqs.length });
  // 6. The counts from the tally subjects' message counts.
  const deadline = Date.now() + timeoutMs;
  let last = "";
  for (;;) {
    const info = await jsm.streams.info("FLEET_BATCHES", { subjects_filter: `agents.batch.${batch}.*.>` });
    const counts = Object.fromEntries(ops.map((op) => [op, { succeeded: 0, failed: 0, dead: 0, canceled: 0, started: 0 }]));
    for (const [subject, n] of Object.entries(info.state.subjects ?? {})) {
      const [kind, op, state] = subject.split(".").slice(3);
      if (!counts[op]) continue;
      if (kind === "started") counts[op].started += n;
      else if (kind === "done" && state in counts[op]) counts[op][state] += n;
    }
    let done = 0;
    for (const c of Object.values(counts)) done += c.succeeded + c.failed + c.dead + c.canceled;
    const key = JSON.stringify(counts);
    if (key !== last) {
      last = key;
      emit({ type: "status", batch_id: batch, done, planned: reqs.length, by_operation: counts });
    }
    if (done >= reqs.length) {
      return ops.every((op) => counts[op].succeeded === plannedByOp[op]) ? 0 : 1;
    }
    if (Date.now() > deadline) {
      process.stderr.write(`batch.mjs: ${done} of ${reqs.length} jobs done after ${args.timeout}s\n`);
      return 1;
    }
    await new Promise((r) => setTimeout(r, 200));
  }
}
