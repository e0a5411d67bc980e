package expert

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"

	"github.com/agentfleet/fleet/loop"
)

// Docstring is the docstring agent's expert: read_current_docstring, then
// read_type_hints, then one write_docstring with a summary and, when the
// body gives a value back (read_type_hints' returns), the return value,
// then submit_result. It gives no params: write_docstring describes every
// parameter it is not given as "The <name words>.", which is all the
// expert would write, and a small model then never has to copy names.
type Docstring struct{}

// Complete implements loop.Model.
func (Docstring) Complete(ctx context.Context, req *loop.Request) (*loop.Response, error) {
	if err := ctxErr(ctx); err != nil {
		return nil, err
	}
	results := tools(req.Messages)
	done := map[string]toolResult{}
	for _, tr := range results {
		done[tr.Name] = tr
	}
	if _, ok := done["read_current_docstring"]; !ok && offered(req, "read_current_docstring") {
		return call("read_current_docstring", map[string]any{})
	}
	hints, ok := done["read_type_hints"]
	if !ok && offered(req, "read_type_hints") {
		return call("read_type_hints", map[string]any{})
	}
	wrote, ok := done["write_docstring"]
	if !ok && offered(req, "write_docstring") && hints.OK && hints.Outcome == "ok" {
		var info struct {
			Name    string `json:"name"`
			Kind    string `json:"kind"`
			Returns string `json:"returns"`
		}
		if json.Unmarshal(hints.Result, &info) == nil {
			ret := info.Returns // what read_type_hints says the body gives back
			if ret == "" {
				ret = returnsOf(nodeText(req.Messages))
			}
			return call("write_docstring", docArgs(info.Name, info.Kind, ret))
		}
	}
	var w struct {
		File string `json:"file"`
	}
	_ = json.Unmarshal(wrote.Result, &w)
	if wrote.OK && wrote.Outcome == "ok" && w.File != "" {
		return call("submit_result", map[string]any{"summary": "documented " + lastName(hints), "changed_files": []string{w.File},
			"status": "success"})
	}
	msg := "could not write the docstring"
	if wrote.Error != "" {
		msg += ": " + wrote.Error
	}
	return call("submit_result", map[string]any{"summary": msg, "changed_files": []string{}, "status": "failed", "error": msg})
}

func lastName(hints toolResult) string {
	var info struct {
		Name string `json:"name"`
	}
	_ = json.Unmarshal(hints.Result, &info)
	return info.Name
}

// docArgs are write_docstring's arguments for the node; ret is what its
// body gives back ("value", "yield" or "none"/"").
func docArgs(name, kind, ret string) map[string]any {
	short := name[strings.LastIndex(name, ".")+1:]
	words := strings.ReplaceAll(strings.Trim(short, "_"), "_", " ")
	args := map[string]any{"summary": summaryFor(words, kind)}
	switch {
	case ret == "yield":
		args["returns"] = "The " + words + " values, one at a time."
	case ret == "value" && (strings.HasPrefix(short, "is_") || strings.HasPrefix(short, "has_")):
		args["returns"] = "True if " + words + ", else False."
	case ret == "value":
		args["returns"] = "The " + words + " result."
	}
	return args
}

func summaryFor(words, kind string) string {
	if kind == "class" {
		return "A " + words + "."
	}
	switch {
	case strings.HasPrefix(words, "get "):
		return "Return the " + strings.TrimPrefix(words, "get ") + "."
	case strings.HasPrefix(words, "is ") || strings.HasPrefix(words, "has "):
		return "Tell whether " + words + "."
	}
	if words == "" {
		return "Run the function."
	}
	return strings.ToUpper(words[:1]) + words[1:] + "."
}

var (
	defLine   = regexp.MustCompile(`^(\s*)(async\s+def|def|class)\s`)
	returnVal = regexp.MustCompile(`^return\s+(\S.*)$`)
	yieldExpr = regexp.MustCompile(`(^|[=(,\s])yield\b`)
)

// returnsOf reads the function's own body in code (nested functions and
// classes left out): "yield" for a generator, "value" when a return
// statement returns something other than None, "" otherwise.
func returnsOf(code string) string {
	lines := strings.Split(code, "\n")
	base, skip := -1, -1
	out := ""
	for _, ln := range lines {
		t := strings.TrimSpace(ln)
		if t == "" || strings.HasPrefix(t, "#") || strings.HasPrefix(t, "@") {
			continue
		}
		ind := len(ln) - len(strings.TrimLeft(ln, " \t"))
		if skip >= 0 {
			if ind > skip {
				continue
			}
			skip = -1
		}
		if m := defLine.FindStringSubmatch(ln); m != nil {
			if base < 0 {
				base = ind
				continue
			}
			if ind > base {
				skip = ind
				continue
			}
		}
		if base < 0 {
			continue
		}
		if m := returnVal.FindStringSubmatch(t); m != nil {
			v := strings.TrimSpace(strings.SplitN(m[1], "#", 2)[0])
			if v != "None" && v != "" && out == "" {
				out = "value"
			}
		}
		if yieldExpr.MatchString(t) {
			out = "yield"
		}
	}
	return out
}
