"""grade_lint: did a lint fix remove the injected issues and nothing else?

The reference is the upstream file the defects were injected into: a correct
fix gives back its syntax tree, its tokens (comments included) and its blank
lines, changes only lines inside the injected spans, and leaves pycodestyle
and pyflakes with nothing the upstream file did not have.
"""
import ast
import difflib
import tokenize
from collections import Counter

from common import report, significant, tokens


def _parse(text, what):
    try:
        ast.parse(text)
        tokens(text)
    except SyntaxError as e:
        return "{} does not parse: {} (line {})".format(what, e.msg, e.lineno)
    except (ValueError, tokenize.TokenError) as e:
        return "{} does not tokenize: {}".format(what, e)
    return None


def _blank(text):
    return sum(1 for ln in text.split("\n") if ln.strip() == "")


def _outside(upstream, result, spans):
    """First upstream line changed outside every span's start..end
    (1-based), or None."""
    a = upstream.split("\n")
    b = result.split("\n")
    sm = difflib.SequenceMatcher(None, a, b, autojunk=False)
    for tag, i1, i2, j1, j2 in sm.get_opcodes():
        if tag == "equal":
            continue
        lo, hi = i1 + 1, max(i2, i1 + 1)  # an insertion sits at i1 + 1
        if tag == "insert" and any(s - 1 <= i1 <= e for s, e in spans):
            continue
        if not any(s <= lo and hi <= e for s, e in spans):
            line = next((k for k in range(lo, hi + 1) if not any(s <= k <= e for s, e in spans)), lo)
            return line, (a[line - 1] if line - 1 < len(a) else ""), (b[j1] if j1 < len(b) else "")
    return None


def _where(spans):
    return ", ".join("{}-{}".format(s, e) for s, e in spans)


def grade(req):
    upstream = req["upstream"]
    result = req["result"]
    path = req["path"]
    ll = req["line_length"]
    # spans: the injected defects ({code, start, end}); code/start/end: one
    spans = req.get("spans") or [{"code": req["code"], "start": req["start"], "end": req["end"]}]
    codes = [s["code"] for s in spans]
    lines = [(s["start"], s["end"]) for s in spans]
    bad = _parse(result, "the fixed file")
    if bad:
        return {"pass": False, "reason": "syntax", "detail": bad}
    if ast.dump(ast.parse(result)) != ast.dump(ast.parse(upstream)):
        return {"pass": False, "reason": "code_changed",
                "detail": "the fixed file's syntax tree differs from the original code (a lint fix must not change it)"}
    su, sr = significant(tokens(upstream)), significant(tokens(result))
    if su != sr:
        i = next((k for k in range(min(len(su), len(sr))) if su[k] != sr[k]), min(len(su), len(sr)))
        got = sr[i][1] if i < len(sr) else "end of file"
        want = su[i][1] if i < len(su) else "end of file"
        return {"pass": False, "reason": "code_changed",
                "detail": "a token or comment changed: expected {!r}, found {!r}".format(want, got)}
    if _blank(result) != _blank(upstream):
        return {"pass": False, "reason": "lines_changed",
                "detail": "{} blank lines, the original has {}".format(_blank(result), _blank(upstream))}
    where = _outside(upstream, result, lines)
    if where is not None:
        return {"pass": False, "reason": "outside_span",
                "detail": "line {} changed, outside lines {} the issues are on: {!r} became {!r}".format(
                    where[0], _where(lines), where[1], where[2])}
    before = Counter(r[0] for r in report(upstream, path, ll))
    after_items = report(result, path, ll)
    after = Counter(r[0] for r in after_items)
    left = [r for r in after_items if r[0] in codes and after[r[0]] > before[r[0]]]
    if left:
        r = left[0]
        return {"pass": False, "reason": "issue_remains",
                "detail": "{} still reported on line {}: {}".format(r[0], r[1], r[3])}
    new = [c for c in after if after[c] > before[c]]
    if new:
        r = next(x for x in after_items if x[0] == new[0])
        return {"pass": False, "reason": "new_issue",
                "detail": "{} new: line {}: {}".format(r[0], r[1], r[3])}
    return {"pass": True, "reason": "", "detail": ""}
