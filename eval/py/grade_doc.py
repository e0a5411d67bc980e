"""grade_doc: is the function documented, in the file's style, and nothing else changed?

The reference is the task's input (the upstream file with the function's
docstring removed). A correct answer adds one docstring to that function:
remove it again and the file is the input, byte for byte outside the
docstring's lines. The docstring names every parameter and, when the
function returns a value, what it returns, in the docstring style the rest of
the file uses (google, numpy or sphinx; any of them when the file has none).
"""
import ast
import re

from common import find_function, returns_value, is_generator, doc_params, start_line

GOOGLE_SECTION = re.compile(r"^\s*(Args|Arguments|Parameters|Keyword Args|Returns|Yields|Raises|Attributes|Examples?):\s*$")
NUMPY_SECTION = re.compile(r"^\s*(Parameters|Returns|Yields|Raises|Attributes|Examples?|Other Parameters)\s*\n\s*-{3,}\s*$",
                           re.M)
SPHINX_FIELD = re.compile(r":(param|returns?|rtype|raises?|type)\b[^:\n]*:")


def style_counts(text):
    g = len(re.findall(r"\n[ \t]*(Args|Arguments|Returns|Raises|Yields|Attributes|Examples?):[ \t]*\n", text))
    n = len(re.findall(r"\n[ \t]*(Parameters|Returns|Raises|Yields|Attributes|Examples?)[ \t]*\n[ \t]*-{3,}", text))
    s = len(SPHINX_FIELD.findall(text))
    return {"google": g, "numpy": n, "sphinx": s}


def file_style(text):
    c = style_counts(text)
    best = max(c, key=lambda k: c[k])
    return best if c[best] > 0 else None


def _sections_google(doc):
    out = {}
    cur = None
    for ln in doc.split("\n"):
        m = GOOGLE_SECTION.match(ln)
        if m:
            cur = m.group(1)
            out.setdefault(cur, [])
            continue
        if cur is not None:
            out[cur].append(ln)
    return out


def _google(doc):
    secs = _sections_google(doc)
    params = []
    for key in ("Args", "Arguments", "Parameters", "Keyword Args"):
        lines = secs.get(key, [])
        ind = min([len(x) - len(x.lstrip()) for x in lines if x.strip()] or [0])
        for ln in lines:
            if ln.strip() and len(ln) - len(ln.lstrip()) == ind:
                m = re.match(r"\s*\**([A-Za-z_][A-Za-z0-9_]*)\s*(\([^)]*\))?\s*:", ln)
                if m:
                    params.append(m.group(1))
    ret = any(k in secs for k in ("Returns", "Yields"))
    return params, ret


def _numpy(doc):
    lines = doc.split("\n")
    params, ret = [], False
    cur = None
    for i, ln in enumerate(lines):
        if i + 1 < len(lines) and re.match(r"^\s*-{3,}\s*$", lines[i + 1]) and ln.strip():
            cur = ln.strip()
            if cur in ("Returns", "Yields"):
                ret = True
            continue
        if re.match(r"^\s*-{3,}\s*$", ln):
            continue
        if cur in ("Parameters", "Other Parameters") and ln.strip():
            m = re.match(r"^(\s*)\**([A-Za-z_][A-Za-z0-9_]*)\s*(:.*)?$", ln)
            base = min([len(x) - len(x.lstrip()) for x in lines if x.strip()] or [0])
            if m and len(m.group(1)) <= base:
                params.append(m.group(2))
    return params, ret


def _sphinx(doc):
    params = re.findall(r":param\s+(?:[^:\s]+\s+)?\**([A-Za-z_][A-Za-z0-9_]*)\s*:", doc)
    ret = re.search(r":(returns?|rtype|yields?)\s*:", doc) is not None
    return params, ret


def doc_style(doc):
    if re.search(r":param\b|:returns?:|:rtype:|:raises?\b", doc):
        return "sphinx"
    if NUMPY_SECTION.search(doc):
        return "numpy"
    if any(GOOGLE_SECTION.match(ln) for ln in doc.split("\n")):
        return "google"
    return None


def _without_doc(fn):
    b0 = fn.body[0]
    if isinstance(b0, ast.Expr) and isinstance(b0.value, ast.Constant) and isinstance(b0.value.value, str):
        return b0
    return None


def grade(req):
    src = req["input"]
    result = req["result"]
    qual = req["node"]
    try:
        tree = ast.parse(result)
    except SyntaxError as e:
        return {"pass": False, "reason": "syntax", "detail": "the file does not parse: {} (line {})".format(e.msg, e.lineno)}
    fn, meth = find_function(tree, qual)
    if fn is None:
        return {"pass": False, "reason": "node_missing", "detail": "no function " + qual + " in the file"}
    d = _without_doc(fn)
    if d is None:
        return {"pass": False, "reason": "no_docstring", "detail": qual + " has no docstring"}
    # Nothing else changed: drop the docstring's lines and compare with the input text.
    rl = result.split("\n")
    rest = rl[:d.lineno - 1] + rl[d.end_lineno:]
    if "\n".join(rest) != src:
        sl = src.split("\n")
        k = next((i for i in range(min(len(rest), len(sl))) if rest[i] != sl[i]), min(len(rest), len(sl)))
        where = "line {} of the original".format(k + 1)
        fn0, _ = find_function(ast.parse(src), qual)
        if fn0 is not None and not (start_line(fn0) <= k + 1 <= fn0.end_lineno):
            return {"pass": False, "reason": "outside_node",
                    "detail": "{} changed, outside {}: {!r}".format(where, qual, sl[k] if k < len(sl) else "")}
        return {"pass": False, "reason": "code_changed",
                "detail": "{} changed besides the docstring: {!r}".format(where, sl[k] if k < len(sl) else "")}
    doc = d.value.value
    params = doc_params(fn, meth)
    needs_ret = returns_value(fn) or is_generator(fn)
    if not params and not needs_ret:
        return {"pass": bool(doc.strip()), "reason": "" if doc.strip() else "empty_docstring",
                "detail": "" if doc.strip() else "the docstring is empty"}
    want = file_style(src)
    got = doc_style(doc)
    if got is None:
        return {"pass": False, "reason": "no_sections",
                "detail": "the docstring has no parameter or return section (google, numpy or sphinx)"}
    if want is not None and got != want:
        return {"pass": False, "reason": "wrong_style", "detail": "written in {} style; the file uses {}".format(got, want)}
    named, has_ret = {"google": _google, "numpy": _numpy, "sphinx": _sphinx}[got](doc)
    missing = [p for p in params if p not in named]
    if missing:
        return {"pass": False, "reason": "param_missing",
                "detail": "parameter(s) not documented: " + ", ".join(missing)}
    extra = [p for p in named if p not in params]
    if extra:
        return {"pass": False, "reason": "param_unknown",
                "detail": "documents parameter(s) the signature does not have: " + ", ".join(extra)}
    if needs_ret and not has_ret:
        return {"pass": False, "reason": "return_missing", "detail": qual + " returns a value the docstring does not describe"}
    if has_ret and not needs_ret:
        return {"pass": False, "reason": "return_wrong", "detail": qual + " returns nothing, but the docstring describes a return value"}
    return {"pass": True, "reason": "", "detail": ""}
