package modelstore

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentfleet/fleet/inference/modelref"
	"github.com/agentfleet/fleet/queue/wire"
)

// Bucket is the Object Store bucket of models (wire.BucketModels).
const Bucket = wire.BucketModels

// DefaultChunkSize is the object chunk Push writes: large enough that a
// 300 MB model is a few hundred messages, below NATS's default 1 MiB
// max_payload.
const DefaultChunkSize = 512 << 10

// Errors, matched with errors.Is.
var (
	// ErrNoBucket: the fleet_models bucket does not exist yet (no worker
	// has started on this NATS server).
	ErrNoBucket = errors.New("modelstore: no " + Bucket + " bucket (start a worker on this NATS server first)")
	// ErrNotFound: no stored model matches the reference.
	ErrNotFound = errors.New("modelstore: model not found")
	// ErrVersionExists: Push was given a version that is already stored.
	ErrVersionExists = errors.New("modelstore: version already stored")
	// ErrDigestMismatch: bytes read do not have the sha256 recorded for
	// them (a corrupt object, a file that changed while it was pushed).
	ErrDigestMismatch = errors.New("modelstore: sha256 mismatch")
)

// Info describes one stored model version.
type Info struct {
	Name    string `json:"name"`
	Version int    `json:"version"`
	Kind    Kind   `json:"kind"`
	// SHA256 is the file's lowercase hex sha256.
	SHA256 string    `json:"sha256"`
	Size   int64     `json:"size"`
	Arch   string    `json:"arch"`
	Pushed time.Time `json:"pushed"`
	// Training is what fleet-train wrote into the GGUF (its
	// general.fleet.train.* keys without the prefix): data digest,
	// hyper-parameters, final losses, eval score. Empty for other files.
	Training map[string]string `json:"training,omitempty"`
}

// Ref returns "name@version".
func (i Info) Ref() string { return modelref.Ref{Name: i.Name, Version: i.Version}.String() }

// Digest returns "sha256:<hex>".
func (i Info) Digest() string { return modelref.DigestPrefix + i.SHA256 }

// ObjectName is the object a version is stored under: "<name>@<version>".
func ObjectName(name string, version int) string { return name + "@" + strconv.Itoa(version) }

// Store is the fleet_models bucket.
type Store struct {
	obs jetstream.ObjectStore
}

// Open opens the existing bucket (ErrNoBucket when there is none).
func Open(ctx context.Context, js jetstream.JetStream) (*Store, error) {
	obs, err := js.ObjectStore(ctx, Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, ErrNoBucket
	}
	if err != nil {
		return nil, fmt.Errorf("modelstore: open %s: %w", Bucket, err)
	}
	return &Store{obs: obs}, nil
}

// New wraps an opened bucket.
func New(obs jetstream.ObjectStore) *Store { return &Store{obs: obs} }

// PushOptions tune Push.
type PushOptions struct {
	// Version to store; 0 = one more than the name's highest stored
	// version (1 for a new name).
	Version int
	// ChunkSize of the object's messages; 0 = DefaultChunkSize.
	ChunkSize int
}

// Push stores the GGUF model or LoRA adapter at path as name. The file is
// checked first (Inspect: a truncated or corrupt GGUF is refused, nothing
// is stored) and hashed; then it is uploaded, and the upload's own sha256
// must equal the first one (a file that changed meanwhile is deleted
// again and refused). An upload that fails part way leaves no object: the
// store publishes an object's metadata only after its last chunk. When the
// name's latest version already has the same sha256 and opts.Version is
// 0, nothing is uploaded and that version is returned with existed true.
func (s *Store) Push(ctx context.Context, name, path string, opts PushOptions) (info Info, existed bool, err error) {
	if !modelref.ValidName(name) {
		return Info{}, false, fmt.Errorf("%w %q: the name must be 1-%d of A-Z a-z 0-9 . _ - starting with a letter or digit", modelref.ErrBadRef, modelref.Clip(name), modelref.MaxNameLen)
	}
	if opts.Version < 0 {
		return Info{}, false, fmt.Errorf("modelstore: version %d: want 1 or more (0 = next)", opts.Version)
	}
	f, err := os.Open(path)
	if err != nil {
		return Info{}, false, fmt.Errorf("modelstore: %w", err)
	}
	defer f.Close()
	kind, arch, err := Inspect(f)
	if err != nil {
		return Info{}, false, fmt.Errorf("%s: %w", path, err)
	}
	training, err := TrainingMeta(f)
	if err != nil {
		return Info{}, false, fmt.Errorf("%s: %w", path, err)
	}
	sum, size, err := hashFrom(f)
	if err != nil {
		return Info{}, false, fmt.Errorf("modelstore: read %s: %w", path, err)
	}
	versions, err := s.versions(ctx, name)
	if err != nil {
		return Info{}, false, err
	}
	version := opts.Version
	if version == 0 {
		if n := len(versions); n > 0 {
			if last := versions[n-1]; last.SHA256 == sum {
				return last, true, nil
			}
			version = versions[n-1].Version + 1
		} else {
			version = 1
		}
	} else if slices.ContainsFunc(versions, func(i Info) bool { return i.Version == version }) {
		return Info{}, false, fmt.Errorf("%w: %s", ErrVersionExists, ObjectName(name, version))
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return Info{}, false, err
	}
	info = Info{Name: name, Version: version, Kind: kind, SHA256: sum, Size: size, Arch: arch, Training: training}
	obj := ObjectName(name, version)
	meta := map[string]string{
		wire.ModelMetaName:    name,
		wire.ModelMetaVersion: strconv.Itoa(version),
		wire.ModelMetaKind:    string(kind),
		wire.ModelMetaSHA256:  sum,
		wire.ModelMetaSize:    strconv.FormatInt(size, 10),
		wire.ModelMetaArch:    arch,
	}
	for k, v := range training {
		meta[wire.ModelMetaTrainPrefix+k] = v
	}
	oi, err := s.obs.Put(ctx, jetstream.ObjectMeta{
		Name:        obj,
		Description: fmt.Sprintf("%s %s (%s)", kind, obj, arch),
		Metadata:    meta,
		Opts:        &jetstream.ObjectMetaOptions{ChunkSize: uint32(cmp.Or(opts.ChunkSize, DefaultChunkSize))},
	}, f)
	if err != nil {
		return Info{}, false, fmt.Errorf("modelstore: upload %s: %w", obj, err)
	}
	if got, ok := objectSHA256(oi); !ok || got != sum || oi.Size != uint64(size) {
		_ = s.obs.Delete(context.WithoutCancel(ctx), obj)
		return Info{}, false, fmt.Errorf("%w: %s changed while it was pushed (sha256 %s before, %s uploaded); nothing stored", ErrDigestMismatch, path, sum, got)
	}
	info.Pushed = oi.ModTime
	return info, false, nil
}

// hashFrom hashes f from its start to its end.
func hashFrom(f *os.File) (string, int64, error) {
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return "", 0, err
	}
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, err
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

// objectSHA256 decodes the object store's own digest ("SHA-256=<base64url>").
func objectSHA256(oi *jetstream.ObjectInfo) (string, bool) {
	b, err := jetstream.DecodeObjectDigest(oi.Digest)
	if err != nil || len(b) != sha256.Size {
		return "", false
	}
	return hex.EncodeToString(b), true
}

// infoOf reads a stored object's metadata; false for objects that are not
// complete fleet models (deleted, or stored by something else).
func infoOf(oi *jetstream.ObjectInfo) (Info, bool) {
	if oi == nil || oi.Deleted || oi.Metadata == nil {
		return Info{}, false
	}
	m := oi.Metadata
	v, err := strconv.Atoi(m[wire.ModelMetaVersion])
	size, err2 := strconv.ParseInt(m[wire.ModelMetaSize], 10, 64)
	i := Info{Name: m[wire.ModelMetaName], Version: v, Kind: Kind(m[wire.ModelMetaKind]), SHA256: m[wire.ModelMetaSHA256],
		Size: size, Arch: m[wire.ModelMetaArch], Pushed: oi.ModTime}
	for k, v := range m {
		if strings.HasPrefix(k, wire.ModelMetaTrainPrefix) {
			if i.Training == nil {
				i.Training = map[string]string{}
			}
			i.Training[strings.TrimPrefix(k, wire.ModelMetaTrainPrefix)] = v
		}
	}
	if err != nil || err2 != nil || !modelref.ValidName(i.Name) || v < 1 || !modelref.DigestRE.MatchString(i.SHA256) ||
		(i.Kind != KindGGUF && i.Kind != KindLoRA) || oi.Name != ObjectName(i.Name, v) {
		return Info{}, false
	}
	return i, true
}

// List returns every stored model version, by name then version.
func (s *Store) List(ctx context.Context) ([]Info, error) {
	ois, err := s.obs.List(ctx)
	if errors.Is(err, jetstream.ErrNoObjectsFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("modelstore: list: %w", err)
	}
	var out []Info
	for _, oi := range ois {
		if i, ok := infoOf(oi); ok {
			out = append(out, i)
		}
	}
	slices.SortFunc(out, func(a, b Info) int {
		return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.Version, b.Version))
	})
	return out, nil
}

func (s *Store) versions(ctx context.Context, name string) ([]Info, error) {
	all, err := s.List(ctx)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(all, func(i Info) bool { return i.Name != name }), nil
}

// Resolve returns the stored version ref names (for a digest, the oldest
// version with that sha256).
func (s *Store) Resolve(ctx context.Context, ref modelref.Ref) (Info, error) {
	if ref.Digest == "" {
		oi, err := s.obs.GetInfo(ctx, ObjectName(ref.Name, ref.Version))
		if errors.Is(err, jetstream.ErrObjectNotFound) {
			return Info{}, fmt.Errorf("%w: %s", ErrNotFound, ref)
		}
		if err != nil {
			return Info{}, fmt.Errorf("modelstore: %s: %w", ref, err)
		}
		i, ok := infoOf(oi)
		if !ok {
			return Info{}, fmt.Errorf("%w: %s (the object has no valid fleet metadata)", ErrNotFound, ref)
		}
		return i, nil
	}
	all, err := s.List(ctx)
	if err != nil {
		return Info{}, err
	}
	for _, i := range all {
		if i.SHA256 == ref.Digest {
			return i, nil
		}
	}
	return Info{}, fmt.Errorf("%w: %s", ErrNotFound, ref)
}

// Remove deletes the version ref names (for a digest, every version with
// that sha256) and returns what it removed. Workers that cached it keep
// their copy for jobs already running; new jobs naming it fail.
func (s *Store) Remove(ctx context.Context, ref modelref.Ref) ([]Info, error) {
	var gone []Info
	if ref.Digest == "" {
		i, err := s.Resolve(ctx, ref)
		if err != nil {
			return nil, err
		}
		gone = []Info{i}
	} else {
		all, err := s.List(ctx)
		if err != nil {
			return nil, err
		}
		for _, i := range all {
			if i.SHA256 == ref.Digest {
				gone = append(gone, i)
			}
		}
		if len(gone) == 0 {
			return nil, fmt.Errorf("%w: %s", ErrNotFound, ref)
		}
	}
	for _, i := range gone {
		if err := s.obs.Delete(ctx, ObjectName(i.Name, i.Version)); err != nil {
			return nil, fmt.Errorf("modelstore: remove %s: %w", i.Ref(), err)
		}
	}
	return gone, nil
}

// Fetch writes the stored bytes of i to w and checks them against i's
// sha256 and size (ErrDigestMismatch). w may have received part of the
// bytes when it fails: write to a temporary file (Cache does).
func (s *Store) Fetch(ctx context.Context, i Info, w io.Writer) error {
	r, err := s.obs.Get(ctx, ObjectName(i.Name, i.Version))
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return fmt.Errorf("%w: %s", ErrNotFound, i.Ref())
	}
	if err != nil {
		return fmt.Errorf("modelstore: fetch %s: %w", i.Ref(), err)
	}
	defer r.Close()
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(w, h), r)
	if errors.Is(err, jetstream.ErrDigestMismatch) {
		return fmt.Errorf("%w: %s: the object's chunks do not match its stored digest", ErrDigestMismatch, i.Ref())
	}
	if err != nil {
		return fmt.Errorf("modelstore: fetch %s: %w", i.Ref(), err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != i.SHA256 || n != i.Size {
		return fmt.Errorf("%w: %s: fetched %d bytes with sha256 %s, want %d bytes with %s", ErrDigestMismatch, i.Ref(), n, got, i.Size, i.SHA256)
	}
	return nil
}
