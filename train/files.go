//go:build llama

package train

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
)

// writeSeqs writes sequences in the trainer's FSEQ format: "FSEQ", u32
// count, then per sequence u32 n, n i32 ids and n u8 target flags.
func writeSeqs(path string, seqs []Sequence) error {
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	var b [4]byte
	w.WriteString("FSEQ")
	binary.LittleEndian.PutUint32(b[:], uint32(len(seqs)))
	w.Write(b[:])
	for _, s := range seqs {
		binary.LittleEndian.PutUint32(b[:], uint32(len(s.IDs)))
		w.Write(b[:])
		for _, id := range s.IDs {
			binary.LittleEndian.PutUint32(b[:], uint32(id))
			w.Write(b[:])
		}
		for _, t := range s.Target {
			if t {
				w.WriteByte(1)
			} else {
				w.WriteByte(0)
			}
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

type stEntry struct {
	DType       string   `json:"dtype"`
	Shape       []int    `json:"shape"`
	DataOffsets [2]int64 `json:"data_offsets"`
}

// readSafetensors reads an F32 safetensors file: tensor name -> shape
// (outermost first, as PyTorch) and values.
func readSafetensors(path string) (map[string]stTensor, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if len(b) < 8 {
		return nil, fmt.Errorf("train: %s: truncated", path)
	}
	n := binary.LittleEndian.Uint64(b)
	if n > uint64(len(b)-8) {
		return nil, fmt.Errorf("train: %s: header length %d beyond the file", path, n)
	}
	var hdr map[string]json.RawMessage
	if err := json.Unmarshal(b[8:8+n], &hdr); err != nil {
		return nil, fmt.Errorf("train: %s: %w", path, err)
	}
	data := b[8+n:]
	out := map[string]stTensor{}
	for name, raw := range hdr {
		if name == "__metadata__" {
			continue
		}
		var e stEntry
		if err := json.Unmarshal(raw, &e); err != nil {
			return nil, fmt.Errorf("train: %s: %s: %w", path, name, err)
		}
		if e.DType != "F32" {
			return nil, fmt.Errorf("train: %s: %s: dtype %s, want F32", path, name, e.DType)
		}
		cnt := 1
		for _, d := range e.Shape {
			cnt *= d
		}
		if e.DataOffsets[0] < 0 || e.DataOffsets[1] > int64(len(data)) || e.DataOffsets[1]-e.DataOffsets[0] != int64(4*cnt) {
			return nil, fmt.Errorf("train: %s: %s: bad data offsets", path, name)
		}
		v := make([]float32, cnt)
		p := data[e.DataOffsets[0]:]
		for i := range v {
			v[i] = math.Float32frombits(binary.LittleEndian.Uint32(p[4*i:]))
		}
		out[name] = stTensor{Shape: e.Shape, Data: v}
	}
	return out, nil
}

type stTensor struct {
	Shape []int
	Data  []float32
}

// writeSafetensors writes F32 tensors (shape outermost first) atomically.
func writeSafetensors(path string, ts map[string]stTensor) error {
	names := make([]string, 0, len(ts))
	for n := range ts {
		names = append(names, n)
	}
	sort.Strings(names)
	hdr := map[string]stEntry{}
	var off int64
	for _, n := range names {
		sz := int64(4 * len(ts[n].Data))
		hdr[n] = stEntry{DType: "F32", Shape: ts[n].Shape, DataOffsets: [2]int64{off, off + sz}}
		off += sz
	}
	h, err := json.Marshal(hdr)
	if err != nil {
		return err
	}
	for len(h)%8 != 0 {
		h = append(h, ' ')
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".st-*.tmp")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	w := bufio.NewWriterSize(tmp, 1<<20)
	var b8 [8]byte
	binary.LittleEndian.PutUint64(b8[:], uint64(len(h)))
	w.Write(b8[:])
	w.Write(h)
	var b4 [4]byte
	for _, n := range names {
		for _, v := range ts[n].Data {
			binary.LittleEndian.PutUint32(b4[:], math.Float32bits(v))
			w.Write(b4[:])
		}
	}
	if err := w.Flush(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// toGGUFShape reverses a PyTorch shape (outermost first) into GGUF order.
func toGGUFShape(s []int) []int {
	out := make([]int, len(s))
	for i := range s {
		out[i] = s[len(s)-1-i]
	}
	return out
}
