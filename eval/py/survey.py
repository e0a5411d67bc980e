"""survey: where defects can be injected into one upstream file.

A lint site is an edit of the upstream file that makes exactly one kind of
issue appear: replace lines start..end (1-based, inclusive; end = start - 1
inserts before start) with `new`, and with eof_nl false drop the final
newline. The Go side picks sites with its seeded generator and checks each
injected text with the real linters before keeping it.
"""
import ast
import tokenize

from common import FIXABLE, comment_lines, func_info, functions, report, string_lines, tokens

# Modules an F401 task imports without using (never bound in the file).
UNUSED_CHOICES = ["bisect", "calendar", "colorsys", "fnmatch", "glob", "heapq", "shlex", "uuid", "zlib",
                  "numbers", "pprint", "sched", "textwrap"]


def _simple(stmt):
    return not isinstance(stmt, (ast.If, ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith, ast.Try,
                                 ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Match)) and \
        stmt.lineno == stmt.end_lineno


def _is_doc(stmt):
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and \
        isinstance(stmt.value.value, str)


def _bodies(tree):
    """Every statement list in the tree."""
    for n in ast.walk(tree):
        for field in ("body", "orelse", "finalbody"):
            b = getattr(n, field, None)
            if isinstance(b, list) and b and isinstance(b[0], ast.stmt):
                yield n, field, b
        for h in getattr(n, "handlers", []) or []:
            yield h, "body", h.body


def _enclosing(funcs, line):
    best = ""
    for q, fn, _ in funcs:
        if fn.lineno <= line <= fn.end_lineno:
            best = q  # methods come after their class's earlier functions; innermost wins
    return best


def lint_sites(text, path, ll):
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    tree = ast.parse(text)
    toks = tokens(text)
    instr = string_lines(toks)
    comments = comment_lines(toks)
    funcs = functions(tree)
    sites = []

    def ok_line(k):
        ln = lines[k - 1]
        return k not in instr and k not in comments and not ln.rstrip().endswith("\\") and "\t" not in ln

    def add(code, start, end, new, **kw):
        s = {"code": code, "start": start, "end": end, "new": new, "node": _enclosing(funcs, start)}
        s.update(kw)
        sites.append(s)

    stmts = {}
    for parent, field, body in _bodies(tree):
        for i, st in enumerate(body):
            stmts[st.lineno] = (parent, field, body, i)
    for k in range(1, len(lines) + 1):
        ln = lines[k - 1]
        if ln.strip() == "":
            if k in instr or "\t" in ln:
                continue
            nxt = k
            while nxt < len(lines) and lines[nxt].strip() == "":
                nxt += 1
            if nxt >= len(lines):
                continue
            ind = lines[nxt][:len(lines[nxt]) - len(lines[nxt].lstrip())] or "    "
            add("W293", k, k, [ind])
            continue
        if ok_line(k) and len(ln) + 2 <= ll:
            add("W291", k, k, [ln + "  "])
        info = stmts.get(k)
        if info is None or not ok_line(k):
            continue
        parent, field, body, i = info
        st = body[i]
        if _simple(st) and not (i == 0 and _is_doc(st)) and len(ln) + 1 <= ll:
            add("E703", k, k, [ln + ";"])
        if i + 1 < len(body) and _simple(st) and _simple(body[i + 1]) and body[i + 1].lineno == k + 1 \
                and ok_line(k + 1) and not isinstance(st, (ast.Import, ast.ImportFrom)) \
                and not isinstance(body[i + 1], (ast.Import, ast.ImportFrom)) and not (i == 0 and _is_doc(st)):
            joined = ln.rstrip() + "; " + lines[k].strip()
            if len(joined) <= ll:
                add("E702", k, k + 1, [joined])
        if isinstance(st, (ast.If, ast.For, ast.While, ast.With)) and len(st.body) == 1 and \
                _simple(st.body[0]) and st.body[0].lineno == k + 1 and ok_line(k + 1) and \
                ln.rstrip().endswith(":") and not (isinstance(st, (ast.For, ast.While)) and st.orelse):
            joined = ln.rstrip() + " " + lines[k].strip()
            if len(joined) <= ll:
                add("E701", k, k + 1, [joined])
        if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef)) and len(st.body) == 1 and \
                _simple(st.body[0]) and not _is_doc(st.body[0]) and st.body[0].lineno == k + 1 and \
                ok_line(k + 1) and ln.rstrip().endswith(":"):
            joined = ln.rstrip() + " " + lines[k].strip()
            if len(joined) <= ll:
                add("E704", k, k + 1, [joined])
    # W191: a module-level function indented with tabs instead of 4 spaces.
    strcont = set()
    for t in toks:
        if t.type == tokenize.STRING and t.end[0] > t.start[0]:
            strcont.update(range(t.start[0] + 1, t.end[0] + 1))
    for n in tree.body:
        if not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        a = min([n.lineno] + [d.lineno for d in n.decorator_list])
        new = []
        good = True
        for k in range(a, n.end_lineno + 1):
            ln = lines[k - 1]
            if k in strcont:
                new.append(ln)  # inside a string: content, not indentation
                continue
            ind = len(ln) - len(ln.lstrip(" "))
            if "\t" in ln[:ind + 1] or (ln.strip() != "" and ind % 4 != 0):
                good = False
                break
            new.append("\t" * (ind // 4) + ln[ind:] if ln.strip() != "" else ln)
        if good and new != lines[a - 1:n.end_lineno]:
            add("W191", a, n.end_lineno, new)
    # W292: the final newline removed.
    if text.endswith("\n") and not text.endswith("\n\n") and lines and len(lines) not in instr:
        add("W292", len(lines), len(lines), [lines[-1]], eof_nl=False)
    # F401: an unused import after the last module-level import.
    last = None
    for n in tree.body:
        if isinstance(n, (ast.Import, ast.ImportFrom)):
            last = n
        elif last is not None:
            break
    # Not in a package's __init__.py: an unused import there is usually a
    # re-export, and the lint agent leaves those to a human.
    if last is not None and last.col_offset == 0 and not path.endswith("__init__.py"):
        bound = set()
        for n in ast.walk(tree):
            if isinstance(n, ast.Name):
                bound.add(n.id)
            elif isinstance(n, ast.alias):
                bound.add((n.asname or n.name).split(".")[0])
            elif isinstance(n, ast.Attribute):
                bound.add(n.attr)
        words = set(text.replace(".", " ").replace("(", " ").split())
        choices = [m for m in UNUSED_CHOICES if m not in bound and m not in words]
        if choices:
            add("F401", last.end_lineno + 1, last.end_lineno, ["import {}"], choices=choices)
    return sites


def survey_file(path, text, ll, lint=True):
    """Everything the suite builder needs to know about one upstream file.

    lint false skips the linters and the lint sites (they are the slow part).
    """
    out = {"path": path, "ok": True, "lines": text.count("\n"), "lint_clean": False, "sites": []}
    try:
        tree = ast.parse(text)
        tokens(text)
    except (SyntaxError, ValueError, tokenize.TokenError) as e:
        return {"path": path, "ok": False, "error": str(e)}
    if lint:
        out["reports"] = report(text, path, ll)
        claimed_upstream = [r for r in out["reports"] if r[0] in FIXABLE]
        out["lint_clean"] = not claimed_upstream
        out["sites"] = lint_sites(text, path, ll) if not claimed_upstream else []
    out["funcs"] = [func_info(q, fn, meth) for q, fn, meth in functions(tree)]
    return out
