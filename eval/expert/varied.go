package expert

import "strings"

// py is a try_calls argument that is a Python expression (a built-in
// function or exception class), in the form the test tools' pyrepr writes
// as source: {"__py__": src, "json": null}.
func py(src string) map[string]any { return map[string]any{"__py__": src, "json": nil} }

// paramRole groups parameter names by what they conventionally hold.
var paramRole = map[string][]string{
	"keyfunc":   {"func", "function", "fn", "f", "key", "keyfunc", "transform", "mapper", "getter"},
	"predicate": {"predicate", "pred", "cond", "condition", "filter"},
	"binop":     {"binop", "op", "combine", "reducer", "merge"},
	"thunk":     {"lamda", "thunk", "callback", "call"},
	"factory":   {"factory", "default_factory"},
	"exception": {"err", "exc", "exception", "error"},
	"seq":       {"seq", "iterable", "items", "coll", "xs", "data", "values", "lst", "it"},
	"seqs":      {"seqs", "iterables"},
	"mapping":   {"d", "dict", "mapping", "m", "dct"},
	"keys":      {"keys", "path"},
	"index":     {"n", "k", "ind", "index", "idx", "i", "size", "count"},
	"element":   {"el", "x", "val", "value", "item", "elem", "sep"},
	"initial":   {"default", "init", "initial", "start"},
	"prob":      {"prob", "p", "probability", "rate", "fraction"},
	"seed":      {"random_state", "seed", "rng"},
}

// profiles are two sets of values by role: words and numbers. A role's
// value in a profile fits the other values of that profile (a key
// function for its sequence's items, a key path into its mapping).
var profiles = []struct {
	name   string
	values map[string]any
}{
	{"words", map[string]any{
		"keyfunc": py("len"), "predicate": py("bool"), "binop": py("max"), "thunk": py("int"),
		"factory": py("dict"), "exception": py("ValueError"), "seq": []any{"apple", "banana", "cherry"},
		"seqs": []any{[]any{"apple", "banana"}, []any{"cherry"}}, "mapping": map[string]any{"a": 1, "b": 2},
		"keys": []any{"a"}, "index": 2, "element": "x", "initial": 0, "prob": 0.5, "seed": 42,
	}},
	{"numbers", map[string]any{
		"keyfunc": py("bool"), "predicate": py("bool"), "binop": py("max"), "thunk": py("list"),
		"factory": py("dict"), "exception": py("TypeError"), "seq": []any{0, 1, 2, 3},
		"seqs": []any{[]any{0, 1}, []any{2, 3}}, "mapping": map[string]any{"a": 0, "b": 5},
		"keys": []any{"b"}, "index": 1, "element": 0, "initial": 10, "prob": 0.25, "seed": 7,
	}},
}

func roleOf(name string) string {
	low := strings.ToLower(name)
	for role, names := range paramRole {
		for _, n := range names {
			if low == n {
				return role
			}
		}
	}
	return ""
}

// variedCalls are try_calls calls with arguments chosen by parameter name,
// one per profile: each parameter whose name has a role gets the
// profile's value; a parameter without a role keeps its default, and when
// it has none the calls are not made (nothing fits it).
func variedCalls(sig signature) []map[string]any {
	var out []map[string]any
	for _, p := range profiles {
		args := map[string]any{}
		ok := true
		for _, prm := range sig.Params {
			if prm.Kind == "var_positional" || prm.Kind == "var_keyword" || prm.Name == "self" || prm.Name == "cls" {
				continue
			}
			role := roleOf(prm.Name)
			switch {
			case role != "":
				args[prm.Name] = p.values[role]
			case prm.Default == nil:
				ok = false
			}
		}
		if ok && len(args) > 0 {
			out = append(out, map[string]any{"name": "varied_" + p.name, "args": args})
		}
	}
	return out
}
