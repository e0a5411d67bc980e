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
        --job-id ID, --msgpack, --no-progress, --no-record, --park-timeout D
        (how long the job may wait on a tool's question, enqueue answer).
        --teacher: a teacher run on the worker's remote teacher model
        (model.teacher); a worker without one dead-letters the job with
        QUEUE_008 (replay it once a worker has a teacher).
        --at TIME (RFC 3339, e.g. 2026-05-01T09:00:00Z) or --in DURATION
        (e.g. 90s, 2h): schedule the job instead (the server queues it at
        that time); prints the job id and exits, status says scheduled.
        --unique[=KEY]: refuse the job (exit 5, naming the holder) while a
        job with the same key is queued or running; the default key is
        operation + node + a digest of the files sent.
        --project P: the project agents' memory is kept under (default: the
        project root's folder name).
        --priority high|normal|low: a free worker slot takes the most urgent
        waiting job first (default normal; low jobs still get a turn after
        queue.priority_streak more urgent ones per slot).
  run <op>[,<op>...] <path>... [--nodes all|functions|top] [--changed[=REV]]
        [--exclude GLOB] [--max-jobs N] [--label k=v] [--batch-id ID] [--no-wait]
        A batch: one job per node and operation over files, folders and globs
        (several operations or paths, a folder, a glob or one of these flags
        make a batch). --nodes picks functions, methods and classes (all),
        functions and methods, or module-level ones (top); --changed only
        the nodes whose text differs from git revision REV (HEAD); --exclude
        leaves out matching files; more jobs than --max-jobs (1000) is
        refused with the count. Everything is checked before anything is
        published; the batch's state lives in NATS (see batch). Then it
        follows the batch like batch attach (--no-wait: print the id, exit).
        --events KINDS (default finished): the events each job publishes.
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
  answer <job-id> <text | ->
        Answer the question of a job waiting on a human (status waiting;
        - reads the answer from stdin). Any worker serving the operation
        resumes the run where it stopped. Refused (exit 5, nothing sent)
        when the job is not waiting.

Batches (state in NATS: fleet_batches, FLEET_BATCHES; readable from anywhere):
  batch list [--json]               every batch: operations, jobs, state, labels
  batch status <batch-id> [--json]  counts per state and operation, failures
        by error code, jobs/s, time left
  batch attach <batch-id> [--json] [--no-progress] [--timeout D]
        One live bar per operation until every job has its result, then
        the status table (exit 0 when every job succeeded, 1 otherwise).
  batch cancel <batch-id> [--reason TEXT]
        Cancel every job of the batch that has not ended.
  batch diff <batch-id> [--op OP] [--where STATE] [--dir D | --anywhere] [--json]
        Every change of the batch's jobs merged per file, with the
        conflicts and the jobs refused (a file changed since it was sent).
  batch accept <batch-id> [--op OP] [--where STATE] [--dir D] [--dry-run] [--json]
        Apply the jobs' changes (default: the succeeded ones) merged per
        file against the files as sent; jobs whose edits overlap are left
        out whole and stay pending (exit 5). Each accepted job gets its
        review.
  batch reject <batch-id> [--op OP] [--where STATE] [--dir D] [--dry-run]
        Reject every selected job (default: every finished one).

Watch:
  watch <path>... --op OP[,OP] [--debounce D] [--no-record]
        On every save, one job per operation for each function, method or
        class whose text changed; a node changed again before its job
        finished supersedes (cancels) it. One line per job, results as
        they come; Ctrl-C cancels the unfinished jobs and lists the rest.

Schedules (server-side, FLEET_RUNS):
  schedule add <name> <operation> <file.py> --every D | --cron EXPR [--node NAME | --line N]
        Run the agent on the node each time the schedule fires: --every
        1s and up, or --cron with six fields (sec min hour day month
        weekday) or @hourly/@daily/@weekly/@monthly/@yearly. Each firing
        runs as job <name>-<unix seconds>.
  schedule list [--json]    schedules and not yet fired --at/--in jobs
  schedule rm <name>        stop a schedule (or a --at/--in job not yet fired)

Memory (what agents with memory: remembered, fleet_memory):
  memory list [--agent OP] [--project P] [--key K] [--json]
        Entries: agent, project, key, when written, text. Corrupt values
        are skipped with a warning.
  memory rm [--agent OP] [--project P] [--key K]
        Remove the selected entries (at least one filter; exit 4 if none).

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

Agents and model versions:
  agents push <dir> [--by NAME] [--json]
        Validate every agent under <dir> (one folder per operation, as the
        worker's agents_dir) with the worker's loader and store each in the
        fleet_agents bucket as its next version (a digest of its files;
        unchanged files store nothing). Any error (file:line: field:
        message) stops the push before anything is stored (exit 2).
        Workers with worker.pushed_agents use the new version for the next
        jobs; running jobs finish on theirs.
  agents list [--json]
        The pushed agents: operation, agent, version, digest, files, when
        and by whom (a corrupt entry is listed as unusable).
  stats [--operation OP] [--since D] [--json]
        Per operation and model version (the agent's model: or its canary's,
        with the model's digest): jobs, success rate, reviewed jobs, accept
        rate, mean turns and tokens per job, from the kept transcripts and
        their reviews.
Training data (docs/TRAINING.md):
  dataset export [--format messages|text] [-o FILE] [filters] [--no-meta]
        Write the stored transcripts joined with their reviews as JSONL, one
        job a line, ordered by finish time then job id: --format messages
        (default) gives {"messages", "tools"} records (TRL, Unsloth); text
        gives {"text", "model_spans"}, the FunctionGemma prompt text exactly
        as the local backend renders it. Filters: --operation OP,...,
        --agent-version DIGEST, --model M, --outcome S,..., --verdict V,...
        (accepted (default), rejected, unreviewed, any), --since T, --until T
        (RFC 3339, YYYY-MM-DD or a duration ago like 72h), --teacher.
        Prints what was kept and dropped, and why, on stderr (a progress
        bar on a terminal). -o replaces FILE only when the export succeeds.

Evals (docs/EVALS.md):
  eval <SUITE> [--split dev|test|train] [--op OP,...] [--model REF]
       [--agent-version V] [--teacher] [--limit N] [--timeout D] [--json]
        Run a suite's tasks as one batch, grade every result with the real
        tools, store the run (fleet_evals) and review each job as
        eval:<suite>. Per operation: rate, 95% interval, failure reasons,
        mean turns, tokens and time per job.
  eval list [--json] | eval compare <RUN_A> <RUN_B> [--all] [--json]
        The stored runs; two runs task by task with an exact McNemar test.
  eval canary <SUITE> --model NAME=FILE.gguf [--op lint] [--split test]
       [--limit N] [--base-limit N] [--out DIR]
        Push the model, give it a canary share of the agent's jobs, run the
        split through the workers, gate (exit 1 on a regression, the canary
        removed) and promote the new version.
  eval build [-o FILE] [--seed N] [--per-split ...] [--ops OP,...] [--extra N]
        Build a suite from Debian's python3.11, python3-toolz, python3-boltons.
  eval local <SUITE> [--split dev] [--op OP,...] | eval agreement
        The expert policies in process; run_linter vs pycodestyle/pyflakes.

Dead letters (FLEET_DLQ):
  dlq list [--json]               dead letters with their code and reason
  dlq show <job-id|seq> [--json]  one dead letter: headers and request
  dlq replay <job-id|seq> [--job-id ID] [--keep] [--wait [--json]]
        Publish the request again as a new job (<job-id>-r<n>) after the
        cause is fixed; the dead letter is removed unless --keep.
  dlq purge [<job-id|seq>] [--operation OP] [--yes]
        Delete exactly the named dead letter (refused when the message at
        its sequence changed since it was read), or every dead letter (of
        OP) (asks on a terminal unless --yes).

Models (the fleet_models Object Store bucket; agents name them in model:/adapter:):
  model push <name> <file.gguf> [--version N] [--json]
        Store a GGUF model or LoRA adapter as <name>@<version>: the file is
        checked (a complete GGUF; general.type adapter = LoRA) and its sha256
        recorded; a truncated or corrupt file is refused (exit 2) and nothing
        is stored. The version is one above the highest stored unless
        --version N (refused, exit 5, when stored). Pushing the bytes of the
        latest version again uploads nothing. Flags: --chunk-size, --timeout.
  model list [--json]       name@version, kind, architecture, size, sha256, time
  model rm <name@version|sha256:hex>
        Delete a version (a digest: every version with it). Jobs naming it
        then fail with QUEUE_009; workers keep their cached copy for running jobs.

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
  4  job, dead letter or model not found
  5  refused: answer to a job that is not waiting; accept/reject conflict
     (local files changed since the job was enqueued, no local record, the
     diff does not apply, already reviewed); model push of a version
     already stored or of a file that changed while it was pushed
  130 interrupted while waiting (the job goes on: enqueue attach <job-id>)
`
