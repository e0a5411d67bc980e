// Package montytest locates the pinned Monty binary and starts pools for
// tests. Tests that need Monty fail (never skip) when it is missing: `make
// test` always fetches it first.
package montytest

import (
	"context"
	"log/slog"
	"os"
	"testing"

	"github.com/agentfleet/fleet/cairn/monty"
)

// Binary returns the Monty binary's path ($FLEET_MONTY_BIN, else the
// repository's .build/monty/monty), failing the test with a hint to run
// `make monty` when it is absent.
func Binary(tb testing.TB) string {
	tb.Helper()
	wd, err := os.Getwd()
	if err != nil {
		tb.Fatal(err)
	}
	p, err := monty.FindBinary(wd)
	if err != nil {
		tb.Fatalf("Monty binary missing: %v", err)
	}
	return p
}

// Pool starts a pool on the test binary with cfg (Binary is filled in when
// empty; a nil Logger logs warnings and errors to stderr) and stops it when
// the test ends.
func Pool(tb testing.TB, cfg monty.Config) *monty.Pool {
	tb.Helper()
	if cfg.Binary == "" {
		cfg.Binary = Binary(tb)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	p, err := monty.NewPool(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	if err := p.Start(context.Background()); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(p.Stop)
	return p
}
