package eval

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// LintCodes are the codes run_linter claims that a suite injects: every
// code the lint agent can fix (E501 lines are reported but not auto-fixed
// by the lint agent, so no E501 task has a fix to grade).
var LintCodes = []string{"W291", "W293", "W191", "W292", "E701", "E702", "E703", "E704", "F401"}

// DefaultSources are the Debian-packaged Python trees suites are built
// from: the standard library (its own test suite left out) and two pure
// Python projects.
func DefaultSources() []Source {
	return []Source{
		{Name: "stdlib", Root: "/usr/lib/python3.11", Package: "libpython3.11-stdlib",
			Skip: []string{"test", "tests", "idle_test", "site-packages", "dist-packages", "__pycache__", "lib2to3"}},
		{Name: "toolz", Root: "/usr/lib/python3/dist-packages/toolz", Package: "python3-toolz", Prefix: "toolz/",
			Skip: []string{"tests", "__pycache__"}, Tests: "tests"},
		{Name: "boltons", Root: "/usr/lib/python3/dist-packages/boltons", Package: "python3-boltons", Prefix: "boltons/",
			Skip: []string{"__pycache__"}},
	}
}

// BuildConfig says what suite Build makes.
type BuildConfig struct {
	// Name names the suite; default "debian-py".
	Name string
	// Seed drives the defects and the choice of tasks.
	Seed uint64
	// Sources default to DefaultSources.
	Sources []Source
	// Ops are the operations to make tasks for; default all four.
	Ops []string
	// PerSplit is the number of tasks per operation and split; default
	// train 200, dev 45, test 45. Lint tasks are spread evenly over
	// LintCodes.
	PerSplit map[string]int
	// LineLength is the E501 limit; default 88 (the lint agent's default).
	LineLength int
	// MaxLintLines: lint tasks only on files of at most this many lines
	// (the whole file is the model's context); default 400.
	MaxLintLines int
	// Extra, when positive, gives each lint task 0 to Extra more defects of
	// other codes in the same file (Task.Extra), apart from each other by
	// at least two lines, and makes files of at most FileNodeLines lines
	// whole-file jobs: training suites where the agent must fix several
	// issues in turn, as in a real file. Default 0: one defect per task
	// (the eval suites).
	Extra int
	// Only, when set, restricts the build to these files (paths under a
	// source's Root), for small suites.
	Only []string
	// Python runs the survey and the linters; nil = a default Python.
	Python *Python
	// SurveyCache, when set, is a folder that keeps each upstream file's
	// survey across builds (other seeds survey the same files); the suite
	// is the same with or without it.
	SurveyCache string
	// Progress, when set, is called after each batch of surveyed files.
	Progress func(surveyed, files int)
}

func (c *BuildConfig) validate() error {
	if c.Name == "" {
		c.Name = "debian-py"
	}
	if len(c.Sources) == 0 {
		c.Sources = DefaultSources()
	}
	if len(c.Ops) == 0 {
		c.Ops = slices.Clone(Ops)
	}
	for _, op := range c.Ops {
		if !slices.Contains(Ops, op) {
			return fmt.Errorf("eval: build: unknown operation %q (%s)", op, strings.Join(Ops, ", "))
		}
	}
	if c.PerSplit == nil {
		c.PerSplit = map[string]int{SplitTrain: 200, SplitDev: 45, SplitTest: 45}
	}
	if c.LineLength <= 0 {
		c.LineLength = 88
	}
	if c.MaxLintLines <= 0 {
		c.MaxLintLines = 400
	}
	if c.Python == nil {
		c.Python = &Python{}
	}
	for _, s := range c.Sources {
		if s.Name == "" || s.Root == "" {
			return errors.New("eval: build: a source needs a name and a root")
		}
		if _, err := os.Stat(s.Root); err != nil {
			return fmt.Errorf("eval: build: source %s: %v (apt-get install -y %s)", s.Name, err, s.Package)
		}
	}
	return nil
}

// srcFile is one upstream file a build may use.
type srcFile struct {
	src   Source
	path  string // under src.Root, slash-separated
	unit  string
	split string
}

// SplitOf is the split of a module or package: a hash of the source's name
// and the unit, so a unit stays in its split whatever the seed (60 % train,
// 20 % dev, 20 % test).
func SplitOf(source, unit string) string {
	sum := sha256.Sum256([]byte(source + ":" + unit))
	switch v := binary.BigEndian.Uint64(sum[:8]) % 100; {
	case v < 60:
		return SplitTrain
	case v < 80:
		return SplitDev
	}
	return SplitTest
}

// unitOf is the module or package a file belongs to: the top-level package
// or module of a tree without Prefix (the standard library: json, email,
// colorsys), the module itself inside a package (toolz/itertoolz).
func unitOf(src Source, rel string) string {
	rel = strings.TrimSuffix(rel, ".py")
	if src.Prefix != "" {
		return strings.TrimSuffix(src.Prefix, "/") + "/" + rel
	}
	return strings.SplitN(rel, "/", 2)[0]
}

func listFiles(srcs []Source, only []string) ([]srcFile, error) {
	var out []srcFile
	for _, src := range srcs {
		err := filepath.WalkDir(src.Root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				if p != src.Root && slices.Contains(src.Skip, d.Name()) {
					return filepath.SkipDir
				}
				return nil
			}
			if !strings.HasSuffix(p, ".py") || !d.Type().IsRegular() {
				return nil
			}
			rel, err := filepath.Rel(src.Root, p)
			if err != nil {
				return err
			}
			rel = filepath.ToSlash(rel)
			if len(only) > 0 && !slices.Contains(only, rel) {
				return nil
			}
			u := unitOf(src, rel)
			out = append(out, srcFile{src: src, path: rel, unit: u, split: SplitOf(src.Name, u)})
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("eval: build: list %s: %w", src.Name, err)
		}
	}
	return out, nil
}

// Build makes a suite: it lists the sources' files, visits them in an
// order drawn from the seed, surveys them with the real parser and linters,
// and keeps injected defects until every operation and split has its
// tasks. Each lint defect is checked before it is kept: pycodestyle and
// pyflakes must report the injected code on the injected text and nothing
// else the upstream file does not have. The same config gives the same
// suite.
func Build(ctx context.Context, cfg BuildConfig) (*Suite, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	files, err := listFiles(cfg.Sources, cfg.Only)
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, errors.New("eval: build: no Python files in the sources")
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x6576616c))
	rng.Shuffle(len(files), func(i, j int) { files[i], files[j] = files[j], files[i] })
	b := &builder{cfg: cfg, rng: rng, have: map[string]int{}}
	if b.cache, err = openSurveyCache(ctx, cfg.SurveyCache, cfg.Python); err != nil {
		return nil, err
	}
	const chunk = 12
	for i := 0; i < len(files) && !b.full(); i += chunk {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		end := min(i+chunk, len(files))
		if err := b.visit(ctx, files[i:end]); err != nil {
			return nil, err
		}
		if cfg.Progress != nil {
			cfg.Progress(end, len(files))
		}
	}
	return b.suite(), nil
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}
