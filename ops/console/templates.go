package console

import (
	"encoding/json"
	"fmt"
	"html/template"
	"strings"
	"time"

	"github.com/agentfleet/fleet/queue/wire"
)

// pageNames are the page templates; each is parsed with layout.html.
var pageNames = []string{"queues", "workers", "jobs", "job", "dlq", "deadletter", "message", "batches", "batch", "batchdiff", "evals", "evalrun"}

func parseTemplates() (map[string]*template.Template, error) {
	out := make(map[string]*template.Template, len(pageNames))
	for _, name := range pageNames {
		t, err := template.New(name).Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/parts.html", "templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("console: templates: %w", err)
		}
		out[name] = t
	}
	return out, nil
}

var funcs = template.FuncMap{
	"ago":      ago,
	"dur":      dur,
	"clock":    func(t time.Time) string { return t.Local().Format("15:04:05.000") },
	"when":     when,
	"bytes":    humanBytes,
	"json":     prettyJSON,
	"clip":     func(n int, s string) string { return clipText(s, n) },
	"join":     strings.Join,
	"terminal": func(s wire.JobState) bool { return s.Terminal() },
	"add":      func(a, b int) int { return a + b },
	"ms":       func(ms int64) time.Duration { return time.Duration(ms) * time.Millisecond },
	"rate":     func(f float64) string { return fmt.Sprintf("%.1f", f) },
	"max1":     func(n int) int { return max(n, 1) },
	"pct": func(a, b int) int {
		if b <= 0 {
			return 0
		}
		return a * 100 / b
	},
	"pctf": func(f float64) string { return fmt.Sprintf("%.1f", 100*f) },
	"addf": func(a, b float64) float64 { return a + b },
}

// ago says how long before now t was ("3s ago"); "" for the zero time.
func ago(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	d := time.Since(t)
	if d < time.Second {
		return "just now"
	}
	return dur(d.Truncate(time.Second)) + " ago"
}

// dur prints a duration briefly: 850ms, 12.3s, 4m10s, 3h5m, 2d4h.
func dur(d time.Duration) string {
	switch {
	case d <= 0:
		return "0"
	case d < time.Millisecond:
		return fmt.Sprintf("%dµs", d.Microseconds())
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < time.Minute:
		return fmt.Sprintf("%.1fs", d.Seconds())
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd%02dh", int(d.Hours())/24, int(d.Hours())%24)
}

// when prints a time as the server's local date and time.
func when(t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	return t.Local().Format("2006-01-02 15:04:05")
}

func humanBytes(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// prettyJSON indents a value (or raw JSON) for a <pre>, capped at 16 KiB;
// what is not JSON is printed as it is.
func prettyJSON(v any) string {
	data, ok := v.(json.RawMessage)
	if !ok {
		var err error
		if data, err = json.Marshal(v); err != nil {
			return fmt.Sprint(v)
		}
	}
	var x any
	if err := json.Unmarshal(data, &x); err != nil {
		return clipText(string(data), 16<<10)
	}
	out, err := json.MarshalIndent(x, "", "  ")
	if err != nil {
		return clipText(string(data), 16<<10)
	}
	return clipText(string(out), 16<<10)
}
