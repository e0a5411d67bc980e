// Package browsertest drives headless Chromium from Go tests through the
// DevTools protocol (github.com/chromedp/chromedp).
//
// Chromium is Debian's chromium package: when it is missing and the test
// runs as root on a machine with apt-get, New installs it first; otherwise
// the test is skipped with a message saying how to install it. The browser
// runs with a fresh profile and without the features that call Google's
// servers (this project's CI has no route to them).
package browsertest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// candidates are the browser executables tried in order after
// $FLEET_CHROMIUM.
var candidates = []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"}

var installOnce sync.Once

// Chromium returns the path of a Chromium executable ($FLEET_CHROMIUM,
// else the first of chromium, chromium-browser, google-chrome on PATH),
// installing Debian's chromium package with apt-get when none is found and
// the process runs as root. It skips the test when there is still none.
func Chromium(tb testing.TB) string {
	tb.Helper()
	if p := os.Getenv("FLEET_CHROMIUM"); p != "" {
		if _, err := os.Stat(p); err != nil {
			tb.Fatalf("FLEET_CHROMIUM=%s: %v", p, err)
		}
		return p
	}
	if p := find(); p != "" {
		return p
	}
	if os.Geteuid() != 0 {
		tb.Skip("browser tests skipped: Chromium is not installed and the test is not root (install it: apt-get install chromium, or set FLEET_CHROMIUM)")
	}
	if _, err := exec.LookPath("apt-get"); err != nil {
		tb.Skip("browser tests skipped: Chromium is not installed and there is no apt-get to install it (set FLEET_CHROMIUM)")
	}
	var out string
	installOnce.Do(func() { out = install() })
	if p := find(); p != "" {
		return p
	}
	tb.Skipf("browser tests skipped: installing Debian's chromium package failed:\n%s", out)
	return ""
}

func find() string {
	for _, name := range candidates {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// install runs apt-get install chromium (after apt-get update when the
// first try fails) and returns the output of what failed.
func install() string {
	run := func(args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "apt-get", args...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		b, err := cmd.CombinedOutput()
		return string(b), err
	}
	installArgs := []string{"install", "-y", "-qq", "--no-install-recommends", "chromium"}
	if _, err := run(installArgs...); err == nil {
		return ""
	}
	if out, err := run("update", "-qq"); err != nil {
		return out
	}
	out, _ := run(installArgs...)
	return out
}

// Flags are the command-line switches the browser starts with:
// chromedp's defaults (headless, no first-run, no default apps, no
// background networking, no sync), plus no sandbox (tests run as root in
// containers), no GPU, and none of the remaining traffic to Google's
// services (QUIC, component updates, field trials, domain reliability,
// translation and optimisation hints).
func Flags(userDataDir string) []chromedp.ExecAllocatorOption {
	return append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.UserDataDir(userDataDir),
		chromedp.WindowSize(1400, 1000),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-domain-reliability", true),
		chromedp.Flag("disable-field-trial-config", true),
		chromedp.Flag("no-pings", true),
		chromedp.Flag("disable-features", "Translate,OptimizationHints,MediaRouter,DialMediaRouteProvider,AutofillServerCommunication,CertificateTransparencyComponentUpdater"),
	)
}

// New starts one headless browser for the test and returns the context of
// its first tab (run chromedp actions with it). The browser is closed when
// the test ends. Subtests share it: give them this context.
func New(tb testing.TB) context.Context {
	tb.Helper()
	exe := Chromium(tb)
	opts := append(Flags(tb.TempDir()), chromedp.ExecPath(exe))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	bctx, cancelBrowser := chromedp.NewContext(actx, chromedp.WithLogf(tb.Logf))
	// Start the browser now (a broken install fails here), on the context
	// it lives as long as: a timeout on this first call would end it.
	if err := chromedp.Do(bctx); err != nil {
		cancelBrowser()
		cancelAlloc()
		tb.Fatalf("starting %s: %v", exe, err)
	}
	tb.Cleanup(func() {
		cancelBrowser()
		cancelAlloc()
	})
	return bctx
}

// Artifacts returns the folder the test's screenshots go to, created if
// needed: $FLEET_TEST_ARTIFACTS/<test name>, else testdata-out/<test name>
// at the repository's root (git-ignored). Unlike t.TempDir it outlives the
// test; it is logged so a failed run can be inspected.
func Artifacts(tb testing.TB, repoRoot string) string {
	tb.Helper()
	base := os.Getenv("FLEET_TEST_ARTIFACTS")
	if base == "" {
		base = filepath.Join(repoRoot, "testdata-out")
	}
	dir := filepath.Join(base, strings.NewReplacer("/", "_", " ", "_").Replace(tb.Name()))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	tb.Logf("screenshots in %s", dir)
	return dir
}

// Screenshot saves the whole page as a PNG file in dir and returns its
// path.
func Screenshot(ctx context.Context, dir, name string) (string, error) {
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		return "", fmt.Errorf("screenshot %s: %w", name, err)
	}
	p := filepath.Join(dir, name+".png")
	if err := os.WriteFile(p, png, 0o644); err != nil {
		return "", err
	}
	return p, nil
}
