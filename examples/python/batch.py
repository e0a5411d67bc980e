#!/usr/bin/env python3
"""Publish a fleet batch from Python and follow it to the end.

    python3 batch.py --operation lint --file a.py --file b.py [--server nats://127.0.0.1:4222]

One job per file and operation, all under one batch id, as docs/PROTOCOL.md
section 21 says a coordinator in any language does it:

1. check that every operation is served (its consumer exists on FLEET_RUNS);
2. create the batch record in the fleet_batches bucket (a create: a used
   batch id is refused);
3. publish the batch's job index on agents.batch.<batch>.jobs;
4. publish each RunRequest on agents.run.<operation> with the batch id in
   the body and in the Fleet-Batch header, job ids "<batch>-<n>";
5. mark the record published;
6. read the batch's counts with one stream-info request over the batch's
   tally subjects until every job has its result.

It prints one JSON object per line: {"type":"published",...}, then
{"type":"status",...} whenever the counts change. Exit status: 0 when every
job succeeded, 1 when one did not or on timeout, 2 on bad usage, an
operation no worker serves, or a connection error.

It uses Python's standard library only: the build machines cannot install
nats-py, so it carries a minimal client of NATS's text protocol (CONNECT,
PUB/HPUB, SUB, MSG/HMSG, PING/PONG) and JetStream's request-reply API,
which is all a batch needs.
"""

import argparse
import asyncio
import json
import os
import re
import secrets
import sys
import time
from datetime import datetime, timezone
from urllib.parse import urlparse


class NatsError(Exception):
    """A protocol or JetStream error."""


class Msg:
    def __init__(self, subject, reply, headers, data, status):
        self.subject, self.reply, self.headers, self.data, self.status = subject, reply, headers, data, status


class Nats:
    """The smallest NATS client a batch needs: publish with headers,
    subscribe, request-reply."""

    def __init__(self):
        self.reader = self.writer = None
        self.subs = {}
        self.next_sid = 1
        self.pongs = []
        self.task = None

    async def connect(self, url, timeout=5):
        u = urlparse(url if "://" in url else "nats://" + url)
        self.reader, self.writer = await asyncio.wait_for(
            asyncio.open_connection(u.hostname or "127.0.0.1", u.port or 4222), timeout)
        info = await asyncio.wait_for(self.reader.readline(), timeout)
        if not info.startswith(b"INFO "):
            raise NatsError("not a NATS server: " + info.decode(errors="replace"))
        opts = {"verbose": False, "pedantic": False, "headers": True, "no_responders": True,
                "protocol": 1, "name": "fleet-example-python-batch", "lang": "python3", "version": "0"}
        if u.username:
            opts.update(user=u.username, **{"pass": u.password or ""})
        self.writer.write(b"CONNECT " + json.dumps(opts).encode() + b"\r\n")
        self.task = asyncio.create_task(self._read())
        await self.flush(timeout)

    async def flush(self, timeout=5):
        fut = asyncio.get_running_loop().create_future()
        self.pongs.append(fut)
        self.writer.write(b"PING\r\n")
        await self.writer.drain()
        await asyncio.wait_for(fut, timeout)

    async def _read(self):
        r = self.reader
        while True:
            line = await r.readline()
            if not line:
                for q in self.subs.values():
                    q.put_nowait(None)
                return
            op, _, rest = line.rstrip(b"\r\n").partition(b" ")
            if op == b"PING":
                self.writer.write(b"PONG\r\n")
            elif op == b"PONG":
                if self.pongs:
                    self.pongs.pop(0).set_result(True)
            elif op in (b"MSG", b"HMSG"):
                parts = rest.decode().split()
                subject, sid = parts[0], int(parts[1])
                if op == b"MSG":
                    reply = parts[2] if len(parts) == 4 else ""
                    hsize, total = 0, int(parts[-1])
                else:
                    reply = parts[2] if len(parts) == 5 else ""
                    hsize, total = int(parts[-2]), int(parts[-1])
                payload = await r.readexactly(total + 2)
                headers, status = {}, ""
                if hsize:
                    head = payload[:hsize].decode().split("\r\n")
                    status = head[0][len("NATS/1.0"):].strip()
                    for h in head[1:]:
                        if ":" in h:
                            k, v = h.split(":", 1)
                            headers[k.strip()] = v.strip()
                q = self.subs.get(sid)
                if q is not None:
                    q.put_nowait(Msg(subject, reply, headers, payload[hsize:total], status))
            elif op == b"-ERR":
                print("nats: server error: " + rest.decode(errors="replace"), file=sys.stderr)

    def subscribe(self, subject):
        sid = self.next_sid
        self.next_sid += 1
        self.subs[sid] = asyncio.Queue()
        self.writer.write(f"SUB {subject} {sid}\r\n".encode())
        return sid

    def unsubscribe(self, sid):
        self.subs.pop(sid, None)
        self.writer.write(f"UNSUB {sid}\r\n".encode())

    def publish(self, subject, data=b"", headers=None, reply=""):
        reply = (" " + reply) if reply else ""
        if headers:
            head = "NATS/1.0\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
            hb = head.encode()
            self.writer.write(f"HPUB {subject}{reply} {len(hb)} {len(hb) + len(data)}\r\n".encode() + hb + data + b"\r\n")
        else:
            self.writer.write(f"PUB {subject}{reply} {len(data)}\r\n".encode() + data + b"\r\n")

    async def request(self, subject, data=b"", headers=None, timeout=5):
        inbox = "_INBOX." + secrets.token_hex(8)
        sid = self.subscribe(inbox)
        try:
            self.publish(subject, data, headers, inbox)
            await self.writer.drain()
            msg = await asyncio.wait_for(self.subs[sid].get(), timeout)
        finally:
            self.unsubscribe(sid)
        if msg is None:
            raise NatsError("connection closed")
        if msg.status.startswith("503"):
            raise NatsError(f"no responders on {subject}")
        return msg

    async def js(self, subject, body=None, timeout=5):
        """A JetStream API request: JSON in, JSON out, errors raised."""
        data = b"" if body is None else json.dumps(body).encode()
        msg = await self.request(subject, data, timeout=timeout)
        out = json.loads(msg.data)
        if "error" in out:
            raise NatsError(f"{subject}: {out['error'].get('description')} (code {out['error'].get('err_code')})")
        return out

    async def js_publish(self, subject, data, headers, timeout=10):
        """A JetStream publish: waits for the PubAck, returns it."""
        msg = await self.request(subject, data, headers, timeout)
        ack = json.loads(msg.data)
        if "error" in ack:
            raise NatsError(f"publish {subject}: {ack['error'].get('description')} (code {ack['error'].get('err_code')})")
        return ack

    async def close(self):
        if self.writer:
            self.writer.close()
        if self.task:
            self.task.cancel()


def now():
    return datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")


def emit(obj):
    print(json.dumps(obj), flush=True)


async def main(a):
    nc = Nats()
    try:
        await nc.connect(a.server)
    except (OSError, asyncio.TimeoutError, NatsError) as e:
        print(f"batch.py: connect {a.server}: {e}", file=sys.stderr)
        return 2
    try:
        return await run(nc, a)
    except NatsError as e:
        print(f"batch.py: {e}", file=sys.stderr)
        return 2
    finally:
        await nc.close()


async def run(nc, a):
    ops = a.operation
    # 1. Served (section 9.1): the consumer named after the operation exists.
    for op in ops:
        try:
            await nc.js(f"$JS.API.CONSUMER.INFO.FLEET_RUNS.{op}")
        except NatsError as e:
            print(f"batch.py: no worker serves {op}: {e}", file=sys.stderr)
            return 2
    batch = a.batch_id or "py-" + secrets.token_hex(6)
    files = {}
    for path in a.file:
        with open(path, encoding="utf-8") as f:
            files[os.path.relpath(path).replace(os.sep, "/")] = f.read()
    jobs, reqs = [], []
    for op in ops:
        for path, text in files.items():
            n = len(jobs) + 1
            job_id = f"{batch}-{n}"
            jobs.append({"n": n, "job_id": job_id, "operation": op, "node_id": path, "node_name": os.path.basename(path),
                         "node_type": "file", "file_path": path})
            reqs.append((op, job_id, {"version": 1, "job_id": job_id, "operation": op, "batch": batch, "labels": a.labels,
                                      "node": {"id": path, "name": os.path.basename(path), "type": "file",
                                               "file_path": path, "text": text},
                                      "files": {path: text}, "options": {}, "created_at": now()}))
    planned_by_op = {op: len(files) for op in ops}
    record = {"version": 1, "batch_id": batch, "operations": ops, "labels": a.labels, "planned": len(jobs),
              "planned_by_op": planned_by_op, "published": 0, "state": "publishing", "publisher": "batch.py",
              "created_at": now(), "updated_at": now()}
    # 2. The record, created: expected last sequence 0 on its key's subject.
    key = f"$KV.fleet_batches.{batch}"
    try:
        ack = await nc.js_publish(key, json.dumps(record).encode(), {"Nats-Expected-Last-Subject-Sequence": "0"})
    except NatsError as e:
        print(f"batch.py: batch {batch} exists or cannot be recorded: {e}", file=sys.stderr)
        return 2
    rev = ack["seq"]
    # 3. The job index (up to 500 jobs a message).
    for i in range(0, len(jobs), 500):
        await nc.js_publish(f"agents.batch.{batch}.jobs", json.dumps({"batch_id": batch, "jobs": jobs[i:i + 500]}).encode(),
                            {"Nats-Msg-Id": f"{batch}-jobs-{i // 500}"})
    # 4. The requests.
    published = {op: 0 for op in ops}
    for op, job_id, req in reqs:
        await nc.js_publish(f"agents.run.{op}", json.dumps(req).encode(), {
            "Nats-Msg-Id": job_id, "Content-Type": "application/json", "Fleet-Protocol": "1",
            "Fleet-Batch": batch, "Fleet-Events": "finished"})
        published[op] += 1
    # 5. The record, published: compare-and-set on the revision written.
    record.update(published=len(reqs), published_by_op=published, state="published", published_at=now(), updated_at=now())
    await nc.js_publish(key, json.dumps(record).encode(), {"Nats-Expected-Last-Subject-Sequence": str(rev)})
    emit({"type": "published", "batch_id": batch, "jobs": len(reqs)})
    # 6. The counts: one stream info over agents.batch.<batch>.*.> gives the
    # message count of each tally subject (started.<op>,
    # done.<op>.<state>.<code>).
    deadline = time.monotonic() + a.timeout
    last = None
    while True:
        info = await nc.js("$JS.API.STREAM.INFO.FLEET_BATCHES", {"subjects_filter": f"agents.batch.{batch}.*.>"})
        counts = {op: {"succeeded": 0, "failed": 0, "dead": 0, "canceled": 0, "started": 0} for op in ops}
        for subject, n in (info.get("state", {}).get("subjects") or {}).items():
            parts = subject.split(".")[3:]
            if parts[0] == "started" and parts[1] in counts:
                counts[parts[1]]["started"] += n
            elif parts[0] == "done" and parts[1] in counts and parts[2] in counts[parts[1]]:
                counts[parts[1]][parts[2]] += n
        done = sum(c[s] for c in counts.values() for s in ("succeeded", "failed", "dead", "canceled"))
        if counts != last:
            last = counts
            emit({"type": "status", "batch_id": batch, "done": done, "planned": len(reqs), "by_operation": counts})
        if done >= len(reqs):
            ok = all(c["succeeded"] == planned_by_op[op] for op, c in counts.items())
            return 0 if ok else 1
        if time.monotonic() > deadline:
            print(f"batch.py: {done} of {len(reqs)} jobs done after {a.timeout}s", file=sys.stderr)
            return 1
        await asyncio.sleep(0.2)


def parse():
    p = argparse.ArgumentParser(description="Publish a fleet batch: one job per file and operation.")
    p.add_argument("--operation", action="append", required=True, help="operation (repeatable), e.g. lint")
    p.add_argument("--file", action="append", required=True, help="a source file (repeatable)")
    p.add_argument("--server", default=os.environ.get("NATS_URL") or "nats://127.0.0.1:4222")
    p.add_argument("--batch-id", default="", help="batch id (default py-<hex>); a used id is refused")
    p.add_argument("--label", action="append", default=[], help="key=value label (repeatable)")
    p.add_argument("--timeout", type=float, default=120, help="seconds to wait for every result")
    a = p.parse_args()
    for op in a.operation:
        if not re.fullmatch(r"[a-z0-9][a-z0-9_-]{0,63}", op):
            p.error(f"bad operation {op!r}")
    if a.batch_id and not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", a.batch_id):
        p.error(f"bad batch id {a.batch_id!r}")
    labels = {}
    for l in a.label:
        k, sep, v = l.partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", k):
            p.error(f"bad label {l!r}: want key=value")
        labels[k] = v
    a.labels = labels
    a.operation = list(dict.fromkeys(a.operation))
    return a


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse())))
