"""grade_test: tests and sample data, run for real.

test: the new test files parse, run under pytest against the module in a
private copy of the workspace and pass (at least one test passed), and fail
once the function's body is replaced by `return None` (a test that cannot
fail teaches nothing). sample_data: the fixture file parses, names the
function, and its arguments bind to the function's signature when the
module is imported.

Nothing but new files under the workspace may change. The child processes
run with a time limit, in a temporary folder that holds only the workspace.
"""
import ast
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

from common import _need, find_function

LIMIT = 120  # seconds per pytest run


def _write(root, files):
    for path, text in files.items():
        full = os.path.join(root, path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "w", encoding="utf-8") as f:
            f.write(text)


def _run(root, args):
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONDONTWRITEBYTECODE": "1", "HOME": root,
           "PYTHONHASHSEED": "0", "LC_ALL": "C.UTF-8"}
    try:
        p = subprocess.run([sys.executable, "-B"] + args, cwd=root, env=env, capture_output=True, text=True,
                           timeout=LIMIT)
    except subprocess.TimeoutExpired:
        return -1, "timed out after {} s".format(LIMIT)
    return p.returncode, (p.stdout + p.stderr)[-3000:]


def _tail(out):
    lines = [ln for ln in out.strip().split("\n") if ln.strip()]
    return lines[-1] if lines else ""


def _mutant(text, qual):
    """text with qual's body replaced by `return None`, or None."""
    tree = ast.parse(text)
    fn, _ = find_function(tree, qual)
    if fn is None:
        return None
    lines = text.split("\n")
    first = fn.body[0]
    ind = lines[first.lineno - 1][:first.col_offset]
    return "\n".join(lines[:first.lineno - 1] + [ind + "return None"] + lines[fn.end_lineno:])


def _new_files(req):
    files, result = req["files"], req["result_files"]
    changed = [p for p in result if p in files and result[p] != files[p]]
    if changed:
        return None, {"pass": False, "reason": "code_changed", "detail": "the job changed " + changed[0]}
    return {p: t for p, t in result.items() if p not in files}, None


def grade_tests(req):
    _need("pytest", "python3-pytest")
    new, bad = _new_files(req)
    if bad:
        return bad
    tests = {p: t for p, t in new.items() if p.endswith(".py") and re.search(r"(^|/)test_[^/]*\.py$", p)}
    if not tests:
        return {"pass": False, "reason": "no_test_file", "detail": "the job wrote no test_*.py file"}
    for p, t in tests.items():
        try:
            ast.parse(t)
        except SyntaxError as e:
            return {"pass": False, "reason": "syntax", "detail": "{} does not parse: {} (line {})".format(p, e.msg, e.lineno)}
    root = tempfile.mkdtemp(prefix="fleet-grade-")
    try:
        _write(root, req["files"])
        _write(root, new)
        args = ["-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts="] + sorted(tests)
        code, out = _run(root, args)
        if code != 0:
            return {"pass": False, "reason": "tests_fail", "detail": "pytest on the module: " + _tail(out)}
        m = re.search(r"(\d+) passed", out)
        if not m or int(m.group(1)) == 0:
            return {"pass": False, "reason": "no_test_ran", "detail": "no test passed: " + _tail(out)}
        mut = _mutant(req["files"][req["path"]], req["node"])
        if mut is None:
            return {"pass": False, "reason": "node_missing", "detail": "no function " + req["node"]}
        _write(root, {req["path"]: mut})
        code, out = _run(root, args)
        if code == 0:
            return {"pass": False, "reason": "cannot_fail",
                    "detail": "the tests still pass when {} returns None: they check nothing it computes".format(req["node"])}
        return {"pass": True, "reason": "", "detail": ""}
    finally:
        shutil.rmtree(root, ignore_errors=True)


BIND = r'''
import importlib, inspect, json, sys
spec = json.loads(sys.argv[1])
mod = importlib.import_module(spec["module"])
obj = mod
for part in spec["name"].split("."):
    obj = getattr(obj, part)
kw = spec["kwargs"]
try:
    inspect.signature(obj).bind(**kw)
except TypeError as e:
    print("BIND " + str(e))
    sys.exit(2)
print("OK")
'''


def grade_sample(req):
    new, bad = _new_files(req)
    if bad:
        return bad
    fixtures = {p: t for p, t in new.items() if p.endswith(".json")}
    if not fixtures:
        return {"pass": False, "reason": "no_fixture", "detail": "the job wrote no JSON fixture file"}
    module = req["path"][:-3].replace("/", ".")
    if module.endswith(".__init__"):
        module = module[:-9]
    root = tempfile.mkdtemp(prefix="fleet-grade-")
    try:
        _write(root, req["files"])
        for p, t in sorted(fixtures.items()):
            try:
                doc = json.loads(t)
            except ValueError as e:
                return {"pass": False, "reason": "bad_fixture", "detail": "{} is not JSON: {}".format(p, e)}
            kw = doc.get("kwargs") if isinstance(doc, dict) else None
            if not isinstance(kw, dict):
                return {"pass": False, "reason": "bad_fixture", "detail": p + " has no kwargs object"}
            if doc.get("function") != module + "." + req["node"]:
                return {"pass": False, "reason": "wrong_function",
                        "detail": "{} names {!r}, not {}".format(p, doc.get("function"), module + "." + req["node"])}
            spec = json.dumps({"module": module, "name": req["node"], "kwargs": kw})
            code, out = _run(root, ["-c", BIND, spec])
            if code == 2:
                return {"pass": False, "reason": "signature", "detail": "the arguments do not fit: " + _tail(out)[5:]}
            if code != 0:
                return {"pass": False, "reason": "import", "detail": "importing {}: {}".format(module, _tail(out))}
        return {"pass": True, "reason": "", "detail": ""}
    finally:
        shutil.rmtree(root, ignore_errors=True)


def grade(req):
    if req["op"] == "test":
        return grade_tests(req)
    return grade_sample(req)
