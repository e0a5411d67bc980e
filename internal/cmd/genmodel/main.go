// Command genmodel writes a FunctionGemma-shaped GGUF with deterministic
// pseudo-random weights and the synthetic vocabulary of internal/gguf.
//
//	go run ./internal/cmd/genmodel -variant full -type q8_0 -o models/functiongemma-270m-random-q8_0.gguf
//	go run ./internal/cmd/genmodel -variant tiny -o models/tiny.gguf
//
// It does nothing when the output already exists and was written by the
// same generator version with the same parameters (a stamp file under
// .build/genmodel records them), so make can call it unconditionally.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/agentfleet/fleet/internal/gguf"
)

// stampVersion changes whenever the generator's output changes.
const stampVersion = "gguf-gen/1"

func main() {
	variant := flag.String("variant", "full", "model shape: full (FunctionGemma 270M) or tiny (unit tests)")
	typ := flag.String("type", "q8_0", "weight type: q8_0, f16 or q4_0")
	seed := flag.Uint64("seed", 1, "weight seed")
	out := flag.String("o", "", "output path (required)")
	force := flag.Bool("f", false, "rewrite even when the stamp matches")
	flag.Parse()
	if *out == "" {
		fmt.Fprintln(os.Stderr, "genmodel: -o is required")
		os.Exit(2)
	}
	var s gguf.Spec
	switch *variant {
	case "full":
		s = gguf.Full()
	case "tiny":
		s = gguf.Tiny()
	default:
		fmt.Fprintf(os.Stderr, "genmodel: unknown -variant %q (want full or tiny)\n", *variant)
		os.Exit(2)
	}
	s.Type = gguf.WeightType(*typ)
	s.Seed = *seed
	stamp := []byte(fmt.Sprintf("%s %+v\n", stampVersion, s))
	stampPath := filepath.Join(".build", "genmodel", filepath.Base(*out)+".stamp")
	if !*force {
		if old, err := os.ReadFile(stampPath); err == nil && bytes.Equal(old, stamp) {
			if _, err := os.Stat(*out); err == nil {
				return
			}
		}
	}
	if err := gguf.WriteFile(*out, s); err != nil {
		fmt.Fprintln(os.Stderr, "genmodel:", err)
		os.Exit(1)
	}
	if err := os.MkdirAll(filepath.Dir(stampPath), 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "genmodel:", err)
		os.Exit(1)
	}
	if err := os.WriteFile(stampPath, stamp, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "genmodel:", err)
		os.Exit(1)
	}
	fmt.Printf("genmodel: wrote %s (%s, %s)\n", *out, s.Name, s.Type)
}
