"""evaltool: the Python side of fleet's evals (Go package eval).

The Go package runs it with Debian's python3: one JSON request on stdin, one
JSON answer on stdout. It uses Python's own `ast` and `tokenize` and the real
linters (pycodestyle, pyflakes; pytest in a child process), never fleet's own
tools. Commands (argv[1]):

  survey  {files: [{path, text}], line_length}    -> {files: [...]}  candidate sites per file
  check   {items: [{path, text}], line_length}    -> {reports: [[[code, line, col, msg], ...], ...]}
  grade   {op, ...}                               -> {pass, reason, detail}

A grader tool that is not installed: exit status 3 and {"missing": "<debian package>"}.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import Missing, _need, report


def main():
    cmd = sys.argv[1] if len(sys.argv) > 1 else ""
    req = json.load(sys.stdin)
    try:
        if cmd == "survey":
            from survey import survey_file
            out = {"files": [survey_file(f["path"], f["text"], req["line_length"], f.get("lint", True))
                            for f in req["files"]]}
        elif cmd == "check":
            if req.get("probe"):
                _need("pycodestyle", "python3-pycodestyle")
                _need("pyflakes", "python3-pyflakes")
                _need("pytest", "python3-pytest")
            out = {"reports": [report(it["text"], it["path"], req["line_length"]) for it in req["items"]]}
        elif cmd == "grade":
            op = req["op"]
            if op == "lint":
                from grade_lint import grade
            elif op == "docstring":
                from grade_doc import grade
            elif op in ("test", "sample_data"):
                from grade_test import grade
            else:
                raise SystemExit("evaltool: unknown operation " + repr(op))
            out = grade(req)
        else:
            raise SystemExit("evaltool: unknown command " + repr(cmd))
    except Missing as m:
        json.dump({"missing": str(m)}, sys.stdout)
        sys.exit(3)
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
