#!/usr/bin/env python3
"""Run one fleet agent job from Python with nats-py (fleet protocol v1).

The Python twin of examples/node/run.mjs, written from docs/PROTOCOL.md:

    pip install nats-py==2.16.0
    python3 run.py --operation lint --file src/app.py [--node load] [--server nats://127.0.0.1:4222]

It checks that a worker serves the operation (the durable consumer named
after it exists on FLEET_RUNS), publishes a JSON RunRequest to
agents.run.<operation> through JetStream (headers Nats-Msg-Id, Content-Type,
Fleet-Protocol), then reads the job's stored events and result from
FLEET_RESULTS with an ordered consumer and prints one JSON object per line
("queued", then "event"s, then "result").
Exit status: 0 when a result arrived, 1 on timeout, 2 on bad usage (an
operation no worker serves included) or a connection/publish error.
"""

import argparse
import asyncio
import datetime
import json
import os
import re
import sys
import uuid

import nats
import nats.errors
from nats.js.errors import NotFoundError


def fail(code, msg):
    print(f"run.py: {msg}", file=sys.stderr)
    sys.exit(code)


def build_request(args):
    # Protocol §2/§5: operation [a-z0-9_-] 1-64 (not starting with - or _),
    # job id [A-Za-z0-9_-] 1-128.
    if not re.fullmatch(r"[a-z0-9][a-z0-9_-]{0,63}", args.operation):
        fail(2, f"--operation must be 1-64 characters of [a-z0-9_-], got {args.operation!r}")
    if not re.fullmatch(r"[A-Za-z0-9_-]{1,128}", args.job_id):
        fail(2, f"--job-id must be 1-128 characters of [A-Za-z0-9_-], got {args.job_id!r}")
    try:
        with open(args.file, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        fail(2, f"cannot read {args.file}: {e}")
    # Workspace path: relative, '/'-separated; outside the current folder,
    # the base name.
    path = os.path.relpath(args.file)
    if path.startswith(".."):
        path = os.path.basename(args.file)
    path = path.replace(os.sep, "/")
    if args.node:
        node = {"id": f"{path}::{args.node}", "name": args.node, "type": "function",
                "file_path": path, "text": text}
    else:
        node = {"id": path, "name": os.path.basename(path), "type": "file", "file_path": path, "text": text}
    options = {} if args.max_turns is None else {"max_turns": args.max_turns}
    return {
        "version": 1,
        "job_id": args.job_id,
        "operation": args.operation,
        "node": node,
        "files": {path: text},
        "options": options,
        "created_at": datetime.datetime.now(datetime.timezone.utc).isoformat(),
    }


def emit(obj):
    print(json.dumps(obj), flush=True)


async def run(args, request):
    try:
        nc = await nats.connect(servers=args.server.split(","), name="fleet-example-python")
    except Exception as e:  # noqa: BLE001 - any connection failure is exit 2
        fail(2, f"cannot connect to {args.server}: {e}")
    try:
        js = nc.jetstream()
        job_id = request["job_id"]
        # Protocol §9.1: a request for an operation without a consumer would
        # wait until a worker dead-letters it (QUEUE_002); refuse it here.
        try:
            await js.consumer_info("FLEET_RUNS", request["operation"])
        except NotFoundError as e:
            what = "the fleet streams do not exist (start a worker first)" if e.err_code == 10059 \
                else f"no worker serves operation {request['operation']!r}"
            print(f"run.py: {what}", file=sys.stderr)
            return 2
        # Subscribe first: the ordered consumer replays everything stored, so
        # the order does not matter, but this way nothing is missed either.
        # nats-py's ordered consumer takes one filter, so agents.*.<job_id>:
        # that also matches the job's lease records (agents.leases.<job_id>,
        # protocol 1.2), which are skipped below.
        sub = await js.subscribe(f"agents.*.{job_id}", stream="FLEET_RESULTS", ordered_consumer=True)
        ack = await js.publish(
            f"agents.run.{request['operation']}",
            json.dumps(request).encode(),
            headers={"Nats-Msg-Id": job_id, "Content-Type": "application/json", "Fleet-Protocol": "1"},
        )
        emit({"type": "queued", "job_id": job_id, "stream": ack.stream, "seq": ack.seq,
              "duplicate": bool(ack.duplicate)})
        deadline = asyncio.get_running_loop().time() + args.timeout
        while True:
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                raise nats.errors.TimeoutError
            msg = await sub.next_msg(timeout=left)
            if msg.subject.startswith("agents.events."):
                emit({"type": "event", "subject": msg.subject, "event": json.loads(msg.data)})
            elif msg.subject.startswith("agents.results."):
                emit({"type": "result", "subject": msg.subject, "result": json.loads(msg.data)})
                return 0
    except nats.errors.TimeoutError:
        print(f"run.py: no result for job {request['job_id']} within {args.timeout}s", file=sys.stderr)
        return 1
    except Exception as e:  # noqa: BLE001
        print(f"run.py: {e}", file=sys.stderr)
        return 2
    finally:
        await nc.close()


def main():
    p = argparse.ArgumentParser(description="Run one fleet agent job (fleet protocol v1).")
    p.add_argument("--operation", required=True, help="agent operation, e.g. lint")
    p.add_argument("--file", required=True, help="source file to send")
    p.add_argument("--node", help="function or class name (default: the whole file)")
    p.add_argument("--server", default=os.environ.get("NATS_URL") or "nats://127.0.0.1:4222")
    p.add_argument("--job-id", default=f"py-{uuid.uuid4().hex}")
    p.add_argument("--max-turns", type=int)
    p.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for the result")
    args = p.parse_args()  # exits 2 on bad usage
    if args.timeout <= 0:
        fail(2, "--timeout must be positive")
    if args.max_turns is not None and not 0 <= args.max_turns <= 1000:
        fail(2, "--max-turns must be 0-1000")
    sys.exit(asyncio.run(run(args, build_request(args))))


if __name__ == "__main__":
    main()
