"""evaltool: the Python side of fleet's evals (Go package eval).

The Go package runs `python3 evaltool.py serve` with Debian's python3 and
keeps the process: one JSON request per line on stdin, {"cmd": ..., "req":
...}, one JSON answer per line on stdout, {"ok": answer}, {"missing":
"<debian package>"} when a grader tool is not installed, or {"error":
traceback}, until stdin ends. It uses Python's own `ast` and `tokenize` and
the real linters (pycodestyle, pyflakes; pytest in a child process), never
fleet's own tools. Commands:

  survey   {files: [{path, text}], line_length}   -> {files: [...]}  candidate sites per file
  check    {items: [{path, text}], line_length}   -> {reports: [[[code, line, col, msg], ...], ...]}
  grade    {op, ...}                              -> {pass, reason, detail}
  versions {}                                     -> {python, pycodestyle, pyflakes}  (the survey cache's key)
"""
import json
import os
import sys
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import Missing, _need, report


def handle(cmd, req):
    """One command's answer (raises Missing when a grader tool is not installed)."""
    if cmd == "survey":
        from survey import survey_file
        return {"files": [survey_file(f["path"], f["text"], req["line_length"], f.get("lint", True))
                          for f in req["files"]]}
    if cmd == "versions":
        import platform
        out = {"python": platform.python_version()}
        for mod in ("pycodestyle", "pyflakes"):
            try:
                out[mod] = getattr(__import__(mod), "__version__", "?")
            except ImportError:
                out[mod] = "missing"
        return out
    if cmd == "check":
        if req.get("probe"):
            _need("pycodestyle", "python3-pycodestyle")
            _need("pyflakes", "python3-pyflakes")
            _need("pytest", "python3-pytest")
        return {"reports": [report(it["text"], it["path"], req["line_length"]) for it in req["items"]]}
    if cmd == "grade":
        op = req["op"]
        if op == "lint":
            from grade_lint import grade
        elif op == "docstring":
            from grade_doc import grade
        elif op in ("test", "sample_data"):
            from grade_test import grade
        else:
            raise ValueError("evaltool: unknown operation " + repr(op))
        return grade(req)
    raise ValueError("evaltool: unknown command " + repr(cmd))


def serve():
    """Answer requests until stdin ends: one JSON line {cmd, req} in, one
    JSON line out: {"ok": answer}, {"missing": package} or {"error": text}.
    Stray prints go to stderr, so stdout carries answers only."""
    out = sys.stdout
    sys.stdout = sys.stderr
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            msg = json.loads(line)
            ans = {"ok": handle(msg["cmd"], msg["req"])}
        except Missing as m:
            ans = {"missing": str(m)}
        except (Exception, SystemExit):
            ans = {"error": traceback.format_exc(limit=4)}
        out.write(json.dumps(ans) + "\n")
        out.flush()


if __name__ == "__main__":
    if sys.argv[1:] != ["serve"]:
        raise SystemExit("usage: evaltool.py serve")
    serve()
