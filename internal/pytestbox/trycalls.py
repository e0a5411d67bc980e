"""try_calls harness: call one module-level function and describe each result.

Reads {"module", "function", "calls", "per_call"} from stdin; writes one
JSON object to the original stdout: {"results": [...]} or {"error": {kind,
message}}. Every call expression is checked before any runs (a call of the
function, or asyncio.run of one), so bad input runs nothing. Each call runs
twice (its expression evaluated anew), under an alarm of per_call seconds;
what the function prints goes to /dev/null.
"""
import ast
import asyncio
import importlib
import itertools
import json
import os
import signal
import sys

MAX_REPR = 1000
MAX_JSON = 4000
MAX_ITEMS = 1000
MAX_MESSAGE = 500
MAX_PARTS = 8


class _Timeout(BaseException):
    pass


def _alarm(signum, frame):
    raise _Timeout()


def _is_call_of(node, fn):
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == fn


def _check(src, fn):
    """None when src is fn(...) or asyncio.run(fn(...)), else why not."""
    try:
        tree = ast.parse(src, mode="eval")
    except SyntaxError as e:
        return "does not parse: " + str(e.msg)
    body = tree.body
    if _is_call_of(body, fn):
        return None
    if (isinstance(body, ast.Call) and isinstance(body.func, ast.Attribute) and body.func.attr == "run"
            and isinstance(body.func.value, ast.Name) and body.func.value.id == "asyncio"
            and len(body.args) == 1 and not body.keywords and _is_call_of(body.args[0], fn)):
        return None
    return "is not a call of " + fn


def _clip(s, n):
    return s if len(s) <= n else s[:n] + "..."


def _repr(v):
    try:
        return _clip(repr(v), MAX_REPR)
    except BaseException as e:  # a broken __repr__ is a fact about the value
        if isinstance(e, _Timeout):
            raise
        return "<repr failed: " + type(e).__name__ + ">"


def _type(v):
    t = type(v)
    return t.__name__ if t.__module__ == "builtins" else t.__module__ + "." + t.__qualname__


def _exact(v):
    """(json text, True) when v survives a JSON round trip equal to itself."""
    try:
        text = json.dumps(v, allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        return None, False
    if len(text) > MAX_JSON:
        return None, False
    try:
        same = v == json.loads(text)
    except Exception:
        return None, False
    return (text, True) if same is True else (None, False)


def _literal(v, text):
    """True when text (v's repr) is a Python literal that evaluates equal to v."""
    if len(text) > MAX_REPR:
        return False
    try:
        same = v == ast.literal_eval(text)
    except Exception:
        return False
    return same is True


def _describe(v, top=True):
    d = {"type": _type(v), "repr": _repr(v), "exact": False}
    d["literal"] = _literal(v, d["repr"])
    text, ok = _exact(v)
    if ok:
        d["exact"] = True
        d["json"] = json.loads(text)
        return d
    if top and not d["literal"] and isinstance(v, tuple) and 0 < len(v) <= MAX_PARTS:
        d["parts"] = [_describe(x, False) for x in v]
        return d
    if hasattr(v, "__next__") and hasattr(v, "__iter__"):
        try:
            items = list(itertools.islice(v, MAX_ITEMS + 1))
        except Exception:  # the call returned; only its iteration fails: no items
            return d
        if len(items) <= MAX_ITEMS:
            d["items_repr"] = _repr(items)
            d["items_literal"] = _literal(items, d["items_repr"])
            text, ok = _exact(items)
            if ok:
                d["items"] = json.loads(text)
    return d


def _once(code, env):
    try:
        v = eval(code, env)
        d = _describe(v)
        d["outcome"] = "returned"
        return d
    except _Timeout:
        raise
    except BaseException as e:
        t = type(e)
        return {"outcome": "raised", "exception": t.__qualname__, "exception_module": t.__module__,
                "message": _clip(str(e), MAX_MESSAGE)}


def _key(d):
    """d for comparing two evaluations: a repr counts only when it is a literal (others hold addresses)."""
    k = {n: v for n, v in d.items() if n not in ("repr", "parts")}
    if d.get("literal"):
        k["repr"] = d["repr"]
    if "parts" in d:
        k["parts"] = [_key(p) for p in d["parts"]]
    return k


def _run(code, env, per_call):
    signal.setitimer(signal.ITIMER_REAL, per_call)
    try:
        first = _once(code, env)
        second = _once(code, env)
    except _Timeout:
        return {"outcome": "timeout"}
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    first["deterministic"] = _key(first) == _key(second)
    return first


def _emit(out, doc):
    out.write(json.dumps(doc))
    out.flush()


def main():
    spec = json.loads(sys.stdin.read())
    out = os.fdopen(os.dup(1), "w")
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    sys.stdin = open(os.devnull)
    fn = spec["function"]
    for k, src in enumerate(spec["calls"]):
        why = _check(src, fn)
        if why is not None:
            _emit(out, {"error": {"kind": "bad_call", "message": "call " + str(k + 1) + " " + why}})
            return
    codes = [compile(src, "<call " + str(k + 1) + ">", "eval") for k, src in enumerate(spec["calls"])]
    signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, spec["per_call"])
    try:
        mod = importlib.import_module(spec["module"])
        target = getattr(mod, fn)
    except _Timeout:
        _emit(out, {"error": {"kind": "import", "message": "importing " + spec["module"] + " timed out"}})
        return
    except BaseException as e:
        msg = type(e).__name__ + ": " + _clip(str(e), MAX_MESSAGE)
        _emit(out, {"error": {"kind": "import", "message": msg}})
        return
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    results = []
    for k, code in enumerate(codes):
        env = {"__builtins__": __builtins__, fn: target, "asyncio": asyncio}
        r = _run(code, env, spec["per_call"])
        r["call"] = spec["calls"][k]
        results.append(r)
    _emit(out, {"results": results})


main()
