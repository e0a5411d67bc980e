package modelstore

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// prescan walks a GGUF file's header (key/value pairs and tensor table)
// without keeping or allocating anything, checking every length against
// the bytes left in the file, so that the decoder that runs after it
// (ollama's fs/ggml, which allocates what the header claims) never sees a
// string, array or dimension count larger than the file. It accepts GGUF
// versions 2 and 3, little-endian (what llama.cpp loads).
func prescan(r io.Reader, size int64) error {
	p := &scanner{r: bufio.NewReaderSize(r, 64<<10), left: size}
	var magic [4]byte
	if err := p.read(magic[:]); err != nil || string(magic[:]) != "GGUF" {
		return errors.New("invalid file magic")
	}
	version, err := p.u32()
	if err != nil {
		return err
	}
	if version != 2 && version != 3 {
		return fmt.Errorf("GGUF version %d, want 2 or 3", version)
	}
	nTensors, err := p.u64()
	if err != nil {
		return err
	}
	nKV, err := p.u64()
	if err != nil {
		return err
	}
	// Each entry takes at least 8 bytes.
	if nTensors > uint64(p.left)/8 || nKV > uint64(p.left)/8 {
		return fmt.Errorf("%d tensors and %d keys cannot fit a %d-byte file", nTensors, nKV, size)
	}
	for range nKV {
		if err := p.skipString(); err != nil {
			return fmt.Errorf("key: %w", err)
		}
		t, err := p.u32()
		if err != nil {
			return err
		}
		if err := p.skipValue(t, 0); err != nil {
			return err
		}
	}
	for range nTensors {
		if err := p.skipString(); err != nil {
			return fmt.Errorf("tensor name: %w", err)
		}
		dims, err := p.u32()
		if err != nil {
			return err
		}
		if dims == 0 || dims > 4 {
			return fmt.Errorf("tensor with %d dimensions, want 1-4", dims)
		}
		// dimensions, type, offset
		if err := p.skip(int64(dims)*8 + 4 + 8); err != nil {
			return err
		}
	}
	return nil
}

type scanner struct {
	r    *bufio.Reader
	left int64
	buf  [8]byte
}

var errShort = errors.New("header runs past the end of the file")

func (p *scanner) read(b []byte) error {
	if int64(len(b)) > p.left {
		return errShort
	}
	if _, err := io.ReadFull(p.r, b); err != nil {
		return errShort
	}
	p.left -= int64(len(b))
	return nil
}

func (p *scanner) skip(n int64) error {
	if n < 0 || n > p.left {
		return errShort
	}
	if _, err := p.r.Discard(int(n)); err != nil {
		return errShort
	}
	p.left -= n
	return nil
}

func (p *scanner) u32() (uint32, error) {
	if err := p.read(p.buf[:4]); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint32(p.buf[:4]), nil
}

func (p *scanner) u64() (uint64, error) {
	if err := p.read(p.buf[:8]); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(p.buf[:8]), nil
}

func (p *scanner) skipString() error {
	n, err := p.u64()
	if err != nil {
		return err
	}
	if n > uint64(p.left) {
		return errShort
	}
	return p.skip(int64(n))
}

// GGUF value types and the fixed sizes of the scalar ones.
const (
	ggufString = 8
	ggufArray  = 9
)

var scalarSize = map[uint32]int64{0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}

func (p *scanner) skipValue(t uint32, depth int) error {
	if n, ok := scalarSize[t]; ok {
		return p.skip(n)
	}
	switch t {
	case ggufString:
		return p.skipString()
	case ggufArray:
		if depth > 0 {
			return errors.New("nested arrays")
		}
		et, err := p.u32()
		if err != nil {
			return err
		}
		n, err := p.u64()
		if err != nil {
			return err
		}
		if n > uint64(p.left) {
			return errShort
		}
		if sz, ok := scalarSize[et]; ok {
			if n > uint64(p.left)/uint64(sz) {
				return errShort
			}
			return p.skip(int64(n) * sz)
		}
		if et != ggufString {
			return fmt.Errorf("array of type %d", et)
		}
		for range n {
			if err := p.skipString(); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("unknown value type %d", t)
}
