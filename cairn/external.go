package cairn

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/agentfleet/fleet/internal/textcut"
)

// Limits of the script-facing external functions (docs/TOOLS.md §4.1).
const (
	// MaxRegexBytes caps a search_content pattern.
	MaxRegexBytes = 1000
	// MaxMatches caps the matches one search_content returns; further
	// matches are dropped.
	MaxMatches = 10000
	// MaxMatchTextBytes caps the text of one match (longer lines are cut at
	// a character boundary and end in "…").
	MaxMatchTextBytes = 1000
	// MaxLogBytes caps one log() message (longer ones are cut).
	MaxLogBytes = 4096
	// MaxLogLines caps the log() lines forwarded per overlay; later lines
	// are dropped (log still returns True).
	MaxLogLines = 1000
)

type param struct {
	name     string
	def      any // default when optional
	optional bool
}

type external struct {
	params []param
	call   func(o *Overlay, ctx context.Context, name string, a []any) (any, error)
}

// externals are the workspace functions of docs/TOOLS.md §4 that the
// workspace serves. Every parameter is a str.
var externals = map[string]external{
	"read_file":      {[]param{{name: "path"}}, extReadFile},
	"write_file":     {[]param{{name: "path"}, {name: "content"}}, extWriteFile},
	"delete_file":    {[]param{{name: "path"}}, extDeleteFile},
	"list_dir":       {[]param{{name: "path", def: ".", optional: true}}, extListDir},
	"file_exists":    {[]param{{name: "path"}}, extFileExists},
	"search_files":   {[]param{{name: "pattern"}}, extSearchFiles},
	"search_content": {[]param{{name: "pattern"}, {name: "path", def: ".", optional: true}}, extSearchContent},
	"log":            {[]param{{name: "message"}}, extLog},
	"python_nodes":   {[]param{{name: "text"}}, extPythonNodes},
}

// ExternalNames returns the names of the external functions CallExternal
// serves, sorted: delete_file, file_exists, list_dir, log, python_nodes,
// read_file, search_content, search_files, write_file.
func ExternalNames() []string {
	names := make([]string, 0, len(externals))
	for n := range externals {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// CallExternal runs the external function name for a script, with Python
// call semantics: positional args and keyword kwargs bound to the
// function's parameters (all of type str; list_dir's path and
// search_content's path default to "."). Values are plain Go (nil, bool,
// int64, float64, string, []any, map[string]any). Results:
//
//	read_file(path) -> str                  write_file(path, content) -> True
//	delete_file(path) -> True               file_exists(path) -> bool
//	list_dir(path=".") -> list[str]         search_files(pattern) -> list[str]
//	search_content(pattern, path=".") -> list[{"file": str, "line": int, "text": str}]
//	log(message) -> True
//	python_nodes(text) -> list[{"name": str, "kind": str, "async": bool, "start": int, "line": int,
//	                            "header_end": int, "colon_col": int, "body_start": int, "end": int}]
//
// Every failure is an *Error whose PythonException method names the
// exception to raise (FileNotFoundError, PermissionError, ValueError,
// IsADirectoryError, NotADirectoryError, TypeError, NameError) and whose
// message is meant for the script; other errors (ErrClosed, ctx ending,
// SQLite failures) are host failures. CallExternal is safe for concurrent use;
// writes are applied one at a time.
func (o *Overlay) CallExternal(ctx context.Context, name string, args []any, kwargs map[string]any) (any, error) {
	if o.closed.Load() {
		return nil, ErrClosed
	}
	ext, ok := externals[name]
	if !ok {
		return nil, newErr(name, "", ErrUnknownFunction, fmt.Sprintf("the workspace has no external function %q", textcut.Clip(name, 100, "…")))
	}
	bound, err := bindArgs(name, ext.params, args, kwargs)
	if err != nil {
		return nil, err
	}
	return ext.call(o, ctx, name, bound)
}

// bindArgs binds positional and keyword arguments the way Python does and
// checks that each is a str.
func bindArgs(fn string, params []param, args []any, kwargs map[string]any) ([]any, error) {
	if len(args) > len(params) {
		return nil, newErr(fn, "", ErrBadArgs, fmt.Sprintf("%s() takes %s but %d were given", fn, countArgs(params), len(args)))
	}
	out := make([]any, len(params))
	set := make([]bool, len(params))
	for i, a := range args {
		out[i], set[i] = a, true
	}
	keys := make([]string, 0, len(kwargs))
	for k := range kwargs {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		i := slices.IndexFunc(params, func(p param) bool { return p.name == k })
		if i < 0 {
			return nil, newErr(fn, "", ErrBadArgs, fmt.Sprintf("%s() got an unexpected keyword argument '%s'", fn, textcut.Clip(k, 100, "…")))
		}
		if set[i] {
			return nil, newErr(fn, "", ErrBadArgs, fmt.Sprintf("%s() got multiple values for argument '%s'", fn, k))
		}
		out[i], set[i] = kwargs[k], true
	}
	var missing []string
	for i, p := range params {
		if !set[i] {
			if p.optional {
				out[i] = p.def
				continue
			}
			missing = append(missing, "'"+p.name+"'")
		}
	}
	if len(missing) > 0 {
		return nil, newErr(fn, "", ErrBadArgs, fmt.Sprintf("%s() missing %d required argument(s): %s", fn, len(missing), strings.Join(missing, ", ")))
	}
	for i, p := range params {
		if _, ok := out[i].(string); !ok {
			return nil, newErr(fn, "", ErrBadArgs, fmt.Sprintf("%s() argument '%s' must be str, not %s", fn, p.name, pyTypeName(out[i])))
		}
	}
	return out, nil
}

func countArgs(params []param) string {
	req := 0
	for _, p := range params {
		if !p.optional {
			req++
		}
	}
	plural := func(n int) string {
		if n == 1 {
			return "1 positional argument"
		}
		return fmt.Sprintf("%d positional arguments", n)
	}
	if req == len(params) {
		return plural(req)
	}
	return fmt.Sprintf("from %d to %s", req, plural(len(params)))
}

// pyTypeName names a plain Go value's Python type.
func pyTypeName(v any) string {
	switch v.(type) {
	case nil:
		return "NoneType"
	case bool:
		return "bool"
	case int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64:
		return "int"
	case float32, float64:
		return "float"
	case string:
		return "str"
	case []byte:
		return "bytes"
	case []any:
		return "list"
	case map[string]any:
		return "dict"
	}
	return fmt.Sprintf("%T", v)
}

func extReadFile(o *Overlay, ctx context.Context, _ string, a []any) (any, error) {
	p := a[0].(string)
	c, err := o.ReadFile(ctx, p)
	if err != nil {
		return nil, err
	}
	if !utf8.Valid(c) {
		return nil, newErr("read_file", p, ErrBadValue, "file is not UTF-8 text")
	}
	return string(c), nil
}

func extWriteFile(o *Overlay, ctx context.Context, _ string, a []any) (any, error) {
	p, content := a[0].(string), a[1].(string)
	if !utf8.ValidString(content) {
		return nil, newErr("write_file", p, ErrBadValue, "content is not valid UTF-8")
	}
	if err := o.WriteFile(ctx, p, []byte(content)); err != nil {
		return nil, err
	}
	return true, nil
}

func extDeleteFile(o *Overlay, ctx context.Context, _ string, a []any) (any, error) {
	if err := o.DeleteFile(ctx, a[0].(string)); err != nil {
		return nil, err
	}
	return true, nil
}

func extListDir(o *Overlay, ctx context.Context, _ string, a []any) (any, error) {
	names, err := o.ListDir(ctx, a[0].(string))
	if err != nil {
		return nil, err
	}
	return stringsToAny(names), nil
}

func extFileExists(o *Overlay, ctx context.Context, _ string, a []any) (any, error) {
	return o.Exists(ctx, a[0].(string))
}

func extSearchFiles(o *Overlay, ctx context.Context, _ string, a []any) (any, error) {
	ps, err := o.Glob(ctx, a[0].(string))
	if err != nil {
		return nil, err
	}
	return stringsToAny(ps), nil
}

func extSearchContent(o *Overlay, ctx context.Context, _ string, a []any) (any, error) {
	ms, err := o.SearchContent(ctx, a[0].(string), a[1].(string))
	if err != nil {
		return nil, err
	}
	out := make([]any, len(ms))
	for i, m := range ms {
		out[i] = map[string]any{"file": m.File, "line": int64(m.Line), "text": m.Text}
	}
	return out, nil
}

func extLog(o *Overlay, ctx context.Context, _ string, a []any) (any, error) {
	o.Log(ctx, a[0].(string))
	return true, nil
}

func stringsToAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// Match is one search_content hit.
type Match struct {
	File string `json:"file"`
	Line int    `json:"line"` // 1-based
	Text string `json:"text"` // the line without its end of line, capped at MaxMatchTextBytes
}

// SearchContent searches the lines of visible files with the Go (RE2)
// regular expression pattern (at most MaxRegexBytes; look-around and
// backreferences are unsupported and reported as ErrBadPattern, a
// ValueError). scope selects files: "", "." and "/" mean all; a pattern
// with *, ? or [ is a glob; a file path means that file; a directory means
// everything below it (ErrNotFound when neither exists). Overlay files come
// first, then stable files the overlay does not shadow, each group in path
// order; files that hold NUL bytes or are not UTF-8 are skipped. At most
// MaxMatches matches are returned.
func (o *Overlay) SearchContent(ctx context.Context, pattern, scope string) ([]Match, error) {
	const op = "search_content"
	if len(pattern) > MaxRegexBytes {
		return nil, newErr(op, "", ErrBadPattern, fmt.Sprintf("regex is %d bytes; the limit is %d", len(pattern), MaxRegexBytes))
	}
	re, err := regexp.Compile(pattern)
	if err != nil {
		return nil, newErr(op, "", ErrBadPattern, fmt.Sprintf("bad regex (Go RE2 syntax; no look-around or backreferences): %v", err))
	}
	var prefix string
	var keep func(string) bool
	if strings.ContainsAny(scope, "*?[") {
		g, err := compileGlob(op, scope)
		if err != nil {
			return nil, err
		}
		prefix, keep = g.literalPrefix(), g.Match
	} else {
		cp, err := cleanDirArg(op, scope)
		if err != nil {
			return nil, err
		}
		if cp != "." {
			isFile, err := o.fileVisible(ctx, cp)
			if err != nil {
				return nil, err
			}
			if isFile {
				prefix, keep = cp, func(p string) bool { return p == cp }
			} else {
				isDir, err := o.dirVisible(ctx, cp)
				if err != nil {
					return nil, err
				}
				if !isDir {
					return nil, newErr(op, scope, ErrNotFound, "")
				}
				prefix = dirPrefix(cp)
			}
		}
	}
	paths, inOv, err := o.visiblePaths(ctx, prefix)
	if err != nil {
		return nil, err
	}
	var ovPaths, stPaths []string
	for _, p := range paths {
		if keep != nil && !keep(p) {
			continue
		}
		if inOv[p] {
			ovPaths = append(ovPaths, p)
		} else {
			stPaths = append(stPaths, p)
		}
	}
	var out []Match
	search := func(p string, c []byte) {
		if isBinary(c) {
			return
		}
		n := 0
		for line := range strings.SplitSeq(string(c), "\n") {
			n++
			line = strings.TrimSuffix(line, "\r")
			if len(out) >= MaxMatches {
				return
			}
			if re.MatchString(line) {
				out = append(out, Match{File: p, Line: n, Text: textcut.Clip(line, MaxMatchTextBytes, "…")})
			}
		}
	}
	for _, group := range []struct {
		paths []string
		q     queryer
	}{{ovPaths, o.db}, {stPaths, o.stable.db}} {
		for _, p := range group.paths {
			if len(out) >= MaxMatches {
				return out, nil
			}
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			var c []byte
			if err := group.q.QueryRowContext(ctx, "SELECT content FROM files WHERE path = ?", p).Scan(&c); err != nil {
				return nil, err
			}
			search(p, c)
		}
	}
	return out, nil
}

// Log forwards a script's log line, prefixed "[workspace id] ", to the
// overlay's logger and log func (see WithLogger, WithLogFunc), cut to
// MaxLogBytes; after MaxLogLines lines per overlay further lines are
// dropped, with one notice when the cap is reached.
func (o *Overlay) Log(ctx context.Context, message string) {
	n := o.logLines.Add(1)
	if n > MaxLogLines+1 {
		return
	}
	if n == MaxLogLines+1 {
		message = fmt.Sprintf("log cap of %d lines reached; further lines are dropped", MaxLogLines)
	} else {
		message = textcut.Clip(strings.ToValidUTF8(message, "\uFFFD"), MaxLogBytes, "…")
	}
	if o.logger != nil {
		o.logger.InfoContext(ctx, "["+o.id+"] "+message, "workspace", o.id)
	}
	if o.logFunc != nil {
		o.logFunc(o.id, message)
	}
}
