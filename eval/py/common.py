"""Shared helpers of evaltool: linter reports, tokens, functions."""
import ast
import io
import tokenize

CLAIMED = ["W291", "W293", "W191", "W292", "E501", "E701", "E702", "E703", "E704", "F401"]
FIXABLE = ["W291", "W293", "W191", "W292", "E701", "E702", "E703", "E704", "F401"]
# pycodestyle's default ignore list without E704 (run_linter reports E704).
PCS_IGNORE = ["E121", "E123", "E126", "E226", "E24", "W503", "W504"]


class Missing(Exception):
    """A grader tool is not installed; the message is its Debian package."""


def _need(module, package):
    try:
        return __import__(module)
    except ImportError:
        raise Missing(package)


# ---------------------------------------------------------------- reports

def pycodestyle_report(text, path, line_length):
    pcs = _need("pycodestyle", "python3-pycodestyle")
    items = []

    class Collect(pcs.BaseReport):
        def error(self, line_number, offset, msg, check):
            code = msg[:4]
            if self._ignore_code(code):
                return None
            items.append([code, line_number, offset + 1, msg[5:]])
            return code

    style = pcs.StyleGuide(quiet=True, max_line_length=line_length, ignore=PCS_IGNORE, reporter=Collect)
    lines = text.splitlines(True)
    checker = pcs.Checker(path, lines=lines, options=style.options, report=Collect(style.options))
    checker.check_all()
    return items


_PYFLAKES_CODES = {
    "UnusedImport": "F401", "ImportShadowedByLoopVar": "F402", "ImportStarUsed": "F403",
    "LateFutureImport": "F404", "ImportStarUsage": "F405", "ImportStarNotPermitted": "F406",
    "FutureFeatureNotDefined": "F407", "MultiValueRepeatedKeyLiteral": "F601",
    "MultiValueRepeatedKeyVariable": "F602", "TooManyExpressionsInStarredAssignment": "F621",
    "TwoStarredExpressions": "F622", "AssertTuple": "F631", "IsLiteral": "F632",
    "InvalidPrintSyntax": "F633", "IfTuple": "F634", "BreakOutsideLoop": "F701",
    "ContinueOutsideLoop": "F702", "YieldOutsideFunction": "F704", "ReturnOutsideFunction": "F706",
    "DefaultExceptNotLast": "F707", "DoctestSyntaxError": "F721", "ForwardAnnotationSyntaxError": "F722",
    "RedefinedWhileUnused": "F811", "UndefinedName": "F821", "UndefinedExport": "F822",
    "UndefinedLocal": "F823", "DuplicateArgument": "F831", "UnusedVariable": "F841",
    "UnusedAnnotation": "F842", "RaiseNotImplemented": "F901",
}


def pyflakes_report(text, path):
    _need("pyflakes", "python3-pyflakes")
    from pyflakes import checker as pfc
    try:
        tree = ast.parse(text, filename=path)
    except SyntaxError as e:
        return [["E999", e.lineno or 0, e.offset or 0, "SyntaxError: " + str(e.msg)]]
    w = pfc.Checker(tree, filename=path)
    out = []
    for m in w.messages:
        name = type(m).__name__
        code = _PYFLAKES_CODES.get(name, "F:" + name)
        out.append([code, m.lineno, getattr(m, "col", 0) + 1, m.message % m.message_args])
    return out


def report(text, path, line_length):
    items = pycodestyle_report(text, path, line_length) + pyflakes_report(text, path)
    items.sort(key=lambda x: (x[1], x[2], x[0]))
    return items


def _noqa_lines(text):
    out = set()
    for i, ln in enumerate(text.split("\n"), 1):
        if "noqa" in ln.lower():
            out.add(i)
    return out


# ---------------------------------------------------------------- tokens

def tokens(text):
    return list(tokenize.generate_tokens(io.StringIO(text).readline))


def string_lines(toks):
    """Lines that start or end inside a multi-line string token (not safe to edit)."""
    out = set()
    for t in toks:
        if t.type == tokenize.STRING and t.end[0] > t.start[0]:
            for k in range(t.start[0], t.end[0] + 1):
                out.add(k)
        if t.type == getattr(tokenize, "FSTRING_START", -1):
            out.add(t.start[0])
    return out


def comment_lines(toks):
    return set(t.start[0] for t in toks if t.type == tokenize.COMMENT)


def significant(toks):
    """(type, string) of every token but layout: what a lint fix must keep."""
    skip = (tokenize.NL, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER)
    out = []
    for t in toks:
        if t.type in skip:
            continue
        s = t.string.strip() if t.type in (tokenize.COMMENT, tokenize.NEWLINE) else t.string
        if t.type == tokenize.NEWLINE:
            s = ""
        out.append((t.type, s))
    return out


# ---------------------------------------------------------------- functions

def _params(fn):
    a = fn.args
    names = [x.arg for x in a.posonlyargs + a.args]
    if a.vararg:
        names.append(a.vararg.arg)
    names += [x.arg for x in a.kwonlyargs]
    if a.kwarg:
        names.append(a.kwarg.arg)
    return names


def _own_nodes(fn):
    """The nodes of fn's body, not those of nested functions, lambdas or classes."""
    stack = list(fn.body)
    while stack:
        n = stack.pop()
        yield n
        for c in ast.iter_child_nodes(n):
            if isinstance(c, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
                continue
            stack.append(c)


def returns_value(fn):
    for n in _own_nodes(fn):
        if isinstance(n, ast.Return) and n.value is not None:
            if isinstance(n.value, ast.Constant) and n.value.value is None:
                continue
            return True
    return False


def is_generator(fn):
    return any(isinstance(n, (ast.Yield, ast.YieldFrom)) for n in _own_nodes(fn))


def functions(tree):
    """[(qualname, node, is_method)] for module-level functions and methods of module-level classes."""
    out = []
    for n in tree.body:
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out.append((n.name, n, False))
        elif isinstance(n, ast.ClassDef):
            for m in n.body:
                if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    out.append((n.name + "." + m.name, m, True))
    return out


def find_function(tree, qualname):
    for q, n, meth in functions(tree):
        if q == qualname:
            return n, meth
    return None, False


def doc_params(fn, is_method):
    names = _params(fn)
    if is_method and names and names[0] in ("self", "cls") and not any(
            isinstance(d, ast.Name) and d.id == "staticmethod" for d in fn.decorator_list):
        names = names[1:]
    return names


def start_line(fn):
    return min([fn.lineno] + [d.lineno for d in fn.decorator_list])


def func_info(q, fn, meth):
    doc = None
    b0 = fn.body[0]
    if isinstance(b0, ast.Expr) and isinstance(b0.value, ast.Constant) and isinstance(b0.value.value, str):
        doc = [b0.lineno, b0.end_lineno]
        # Removable: on lines of its own, below the header, with a statement after it.
        header_end = b0.lineno - 1
        if len(fn.body) < 2 or fn.body[1].lineno <= b0.end_lineno or header_end < fn.lineno:
            doc = None
    return {"name": q, "method": meth, "start": start_line(fn), "line": fn.lineno, "end": fn.end_lineno,
            "body": len(fn.body), "doc": doc, "params": doc_params(fn, meth),
            "returns": returns_value(fn), "generator": is_generator(fn),
            "async": isinstance(fn, ast.AsyncFunctionDef)}
