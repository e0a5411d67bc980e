package filedigest

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

func TestSHA256CachedPerVersion(t *testing.T) {
	p := filepath.Join(t.TempDir(), "m.gguf")
	data := []byte("GGUF pretend weights")
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	want := "sha256:" + hex.EncodeToString(sum[:])
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if got, err := SHA256(p); err != nil || got != want {
				t.Errorf("SHA256 = %q, %v; want %q", got, err, want)
			}
		})
	}
	wg.Wait()
	// A rewritten file (new size and time) is hashed again.
	data2 := []byte("GGUF other weights, longer")
	if err := os.WriteFile(p, data2, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(p, time.Now(), time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	sum2 := sha256.Sum256(data2)
	if got, err := SHA256(p); err != nil || got != "sha256:"+hex.EncodeToString(sum2[:]) {
		t.Fatalf("after rewrite: %q, %v", got, err)
	}
	if _, err := SHA256(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Fatal("missing file: no error")
	}
}
