package main

const helpText = `enqueue: run fleet agents on Python code, follow the jobs, review their
changes and operate the queue.

Usage:
  enqueue [connection flags] <command> [flags] [args]
  enqueue <command> --help      the command's flags

Jobs:
  run <operation> <file.py> [--node NAME | --line N] [--json] [--no-wait]
        Publish a job for the file (or the function/class NAME, or the one
        enclosing line N), show its progress, then the result and its diff.
        On a terminal: the event lines and a live progress line (turn i/max,
        what runs, elapsed time); otherwise plain lines. The workspace sent
        is the file plus the project's config files (pyproject.toml,
        ruff.toml, setup.cfg, pytest.ini, tox.ini, conftest.py; tests/ for
        the test and sample_data operations), relative to the project root
        (the nearest folder with pyproject.toml or .git). The sha256 of each
        file sent is recorded in <root>/.fleet/jobs/<job-id>.json for accept.
        Flags: --max-turns N, --timeout D (how long to wait, default 10m),
        --job-id ID, --msgpack, --no-progress, --no-record.
        --at TIME (RFC 3339, e.g. 2026-05-01T09:00:00Z) or --in DURATION
        (e.g. 90s, 2h): schedule the job instead (the server queues it at
        that time); prints the job id and exits, status says scheduled.
        --unique[=KEY]: refuse the job (exit 5, naming the holder) while a
        job with the same key is queued or running; the default key is
        operation + node + a digest of the files sent.
        --priority high|normal|low: a free worker slot takes the most urgent
        waiting job first (default normal; low jobs still get a turn after
        queue.priority_streak more urgent ones per slot).
  attach <job-id> [--json] [--no-progress]
        Show a job's events (stored ones first, then live) and its result,
        also long after it finished.
  status <job-id> [--json]
        Print a job's status record and, when stored, its result summary.
  list [--state S] [--operation OP] [--limit N] [--json]
        List the jobs of the fleet_jobs bucket: job id, operation, state,
        worker, attempt, last update (oldest first).
  cancel <job-id> [--reason TEXT]
        Cancel a queued, scheduled or running job.

Schedules (server-side, FLEET_RUNS):
  schedule add <name> <operation> <file.py> --every D | --cron EXPR [--node NAME | --line N]
        Run the agent on the node each time the schedule fires: --every
        1s and up, or --cron with six fields (sec min hour day month
        weekday) or @hourly/@daily/@weekly/@monthly/@yearly. Each firing
        runs as job <name>-<unix seconds>.
  schedule list [--json]    schedules and not yet fired --at/--in jobs
  schedule rm <name>        stop a schedule (or a --at/--in job not yet fired)

Review:
  accept <job-id> [--dir D] [--force] [--reviewer NAME] [--note TEXT]
        Apply the job's diff to the local files under the project root D
        (default: the project root of the current folder). Refused (exit 5,
        nothing written) when a file changed since the job was enqueued, the
        job's record is missing, or it was already accepted or rejected;
        --force applies the diff where its context still matches. Then
        publishes the review (accepted, by NAME, default $USER).
  reject <job-id> [--dir D] [--reviewer NAME] [--note TEXT]
        Mark the finished job rejected in its local record (nothing is
        written to the project; accept then refuses it) and publish the
        review (rejected).
  transcript <job-id> [--json]
        Print the finished job's transcript (model and digest, tools offered,
        every message, outcome) with its review.

Dead letters (FLEET_DLQ):
  dlq list [--json]               dead letters with their code and reason
  dlq show <job-id|seq> [--json]  one dead letter: headers and request
  dlq replay <job-id|seq> [--job-id ID] [--keep] [--wait [--json]]
        Publish the request again as a new job (<job-id>-r<n>) after the
        cause is fixed; the dead letter is removed unless --keep.
  dlq purge [--operation OP] [--yes]
        Delete the dead letters (asks on a terminal unless --yes).

Console:
  console [--listen ADDR] [--allow-actions] [--dir D]
        Serve the web console (queues, workers, jobs with live turns, dead
        letters) on ADDR (default 127.0.0.1:8080) until interrupted.
        Read-only unless --allow-actions: then it cancels jobs, replays and
        purges dead letters, and accepts or rejects diffs into the project
        root D like accept and reject. NATS permissions apply.

Connection flags (shared with the worker):
  -config FILE      the worker's YAML configuration (nats section: url, creds,
                    nkey_seed, user/password, token, tls); FLEET_* variables apply too
  --nats-url URL    NATS server URL (default: nats.url, else the embedded server's
                    nats.embedded.listen, 127.0.0.1:4222)

--json prints newline-delimited JSON (run/attach: each event, then the result).

Exit codes:
  0  success (the job succeeded; the command did what it was asked)
  1  the job failed, was dead-lettered or canceled (cancel: it had already
     finished; accept: it did not succeed or has not finished)
  2  usage error: bad flags or arguments, unreadable file, unknown node, bad configuration
  3  connection error or timeout: NATS unreachable, no fleet streams, --timeout passed
  4  job or dead letter not found
  5  refused: accept/reject conflict (local files changed since the job was
     enqueued, no local record, the diff does not apply, already reviewed)
  130 interrupted while waiting (the job goes on: enqueue attach <job-id>)
`
