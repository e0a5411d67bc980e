package monty

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Config configures a Pool. The zero value of every field but Binary means
// "use the default"; -1 means "unlimited" where documented.
type Config struct {
	// Binary is the path of the Monty executable (required; see FindBinary).
	Binary string
	// SHA256 is the expected sha256 of Binary, checked at Start.
	// "" = BinarySHA256, the pinned 0.0.23 build.
	SHA256 string
	// Size is the number of warm processes. 0 = 2.
	Size int
	// MaxRunsPerProcess recycles a process after this many runs.
	// 0 = 1000; -1 = never.
	MaxRunsPerProcess int
	// MemoryLimit is Monty's heap cap per run, in bytes (MemoryError).
	// 0 = 128 MiB; -1 = unlimited.
	MemoryLimit int64
	// RecursionLimit is Monty's maximum recursion depth (RecursionError).
	// 0 = 400.
	RecursionLimit int
	// MaxDuration is Monty's interpreter-time budget per run; time spent in
	// host externals does not count. The wall-clock limit, externals
	// included, is the deadline of the ctx passed to Run. 0 = 10s;
	// -1 = unlimited.
	MaxDuration time.Duration
	// MaxSuspensions caps the host round trips of one run (external calls,
	// Input() calls, future resolutions, name lookups, OS calls). The child
	// does not enforce this itself. 0 = 500; -1 = unlimited.
	MaxSuspensions int
	// MaxOutputBytes caps the print output kept per run. 0 = 64 KiB.
	MaxOutputBytes int
	// MaxValueBytes caps a value crossing the boundary in either direction
	// (an external's result, the script's result). 0 = 10 MiB.
	MaxValueBytes int
	// GCInterval is passed to Monty's garbage-collector tuning; 0 leaves
	// Monty's default.
	GCInterval uint64
	// SnapshotScripts caps the scripts whose start-up snapshot the pool
	// keeps (snapshot.go: later runs of a script skip its parse and start
	// from its first suspension). 0 = 64; -1 = no snapshots, every run is
	// fed.
	SnapshotScripts int
	// StartTimeout bounds spawning and self-testing one process. 0 = 10s.
	StartTimeout time.Duration
	// Logger receives process lifecycle messages and the children's stderr.
	// nil = slog.Default().
	Logger *slog.Logger
}

// Defaults applied by validate.
const (
	DefaultSize              = 2
	DefaultMaxRunsPerProcess = 1000
	DefaultMemoryLimit       = 128 << 20
	DefaultRecursionLimit    = 400
	DefaultMaxDuration       = 10 * time.Second
	DefaultMaxSuspensions    = 500
	DefaultMaxOutputBytes    = 64 << 10
	DefaultMaxValueBytes     = 10 << 20
	DefaultStartTimeout      = 10 * time.Second
	DefaultSnapshotScripts   = 64
)

func (c *Config) validate() error {
	if c.Binary == "" {
		return errEmptyBinary
	}
	c.SHA256 = strings.ToLower(cmp.Or(c.SHA256, BinarySHA256))
	if c.Size < 0 {
		return fmt.Errorf("monty: Size must be >= 0, got %d", c.Size)
	}
	c.Size = cmp.Or(c.Size, DefaultSize)
	if c.MaxRunsPerProcess < -1 {
		return fmt.Errorf("monty: MaxRunsPerProcess must be >= -1, got %d", c.MaxRunsPerProcess)
	}
	c.MaxRunsPerProcess = cmp.Or(c.MaxRunsPerProcess, DefaultMaxRunsPerProcess)
	if c.MemoryLimit < -1 {
		return fmt.Errorf("monty: MemoryLimit must be >= -1, got %d", c.MemoryLimit)
	}
	c.MemoryLimit = cmp.Or(c.MemoryLimit, DefaultMemoryLimit)
	if c.RecursionLimit < 0 {
		return fmt.Errorf("monty: RecursionLimit must be >= 0, got %d", c.RecursionLimit)
	}
	c.RecursionLimit = cmp.Or(c.RecursionLimit, DefaultRecursionLimit)
	if c.MaxDuration < -1 {
		return fmt.Errorf("monty: MaxDuration must be >= -1, got %v", c.MaxDuration)
	}
	if c.MaxDuration > 0 && c.MaxDuration < time.Millisecond {
		return fmt.Errorf("monty: MaxDuration must be at least 1ms, got %v", c.MaxDuration)
	}
	c.MaxDuration = cmp.Or(c.MaxDuration, DefaultMaxDuration)
	if c.MaxSuspensions < -1 {
		return fmt.Errorf("monty: MaxSuspensions must be >= -1, got %d", c.MaxSuspensions)
	}
	c.MaxSuspensions = cmp.Or(c.MaxSuspensions, DefaultMaxSuspensions)
	if c.MaxOutputBytes < 0 || c.MaxValueBytes < 0 {
		return errors.New("monty: MaxOutputBytes and MaxValueBytes must be >= 0")
	}
	c.MaxOutputBytes = cmp.Or(c.MaxOutputBytes, DefaultMaxOutputBytes)
	c.MaxValueBytes = cmp.Or(c.MaxValueBytes, DefaultMaxValueBytes)
	if c.MaxValueBytes > defaultFrameLimit-(1<<20) {
		return fmt.Errorf("monty: MaxValueBytes must be at most %d", defaultFrameLimit-(1<<20))
	}
	if c.SnapshotScripts < -1 {
		return fmt.Errorf("monty: SnapshotScripts must be >= -1, got %d", c.SnapshotScripts)
	}
	c.SnapshotScripts = cmp.Or(c.SnapshotScripts, DefaultSnapshotScripts)
	if c.StartTimeout < 0 {
		return fmt.Errorf("monty: StartTimeout must be >= 0, got %v", c.StartTimeout)
	}
	c.StartTimeout = cmp.Or(c.StartTimeout, DefaultStartTimeout)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// limits converts the config into Monty's ResourceLimits.
func (c *Config) limits() *limits {
	l := &limits{maxRecursion: uint64(c.RecursionLimit), gcInterval: c.GCInterval}
	if c.MemoryLimit > 0 {
		l.maxMemoryBytes = uint64(c.MemoryLimit)
	}
	if c.MaxDuration > 0 {
		l.maxDurationMicros = uint64(c.MaxDuration / time.Microsecond)
	}
	if c.MaxSuspensions > 0 {
		l.maxSuspensions = uint64(c.MaxSuspensions)
	}
	return l
}

// Stats counts a pool's activity since Start.
type Stats struct {
	// Runs is the number of Run calls that reached a process.
	Runs int64
	// Spawned counts processes started (the warm set and replacements).
	Spawned int64
	// Recycled counts processes retired after a limit error, a crash, a
	// timeout or MaxRunsPerProcess runs.
	Recycled int64
	// Loaded counts the runs started from a script's start-up snapshot
	// instead of a feed.
	Loaded int64
	// Snapshots is the number of scripts with a start-up snapshot.
	Snapshots int
}

// Pool is a set of warm Monty processes running .pym tools. Each Run gets one
// process exclusively and a fresh Monty session. A Pool is safe for
// concurrent use; at most Config.Size runs execute at once and further Run
// calls wait for a free process (or their ctx).
type Pool struct {
	cfg    Config
	log    *slog.Logger
	limits *limits

	mu      sync.Mutex
	state   int // poolNew, poolStarted, poolStopped
	done    chan struct{}
	all     map[*child]struct{}
	idle    chan *child
	active  sync.WaitGroup // Run calls in flight
	bg      sync.WaitGroup // preparing and replacing processes
	runs    atomic.Int64
	spawned atomic.Int64
	recycle atomic.Int64
	loaded  atomic.Int64
	snaps   *snapshots
}

const (
	poolNew = iota
	poolStarted
	poolStopped
)

// NewPool validates cfg and returns a pool that is not started yet.
func NewPool(cfg Config) (*Pool, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Pool{
		cfg:    cfg,
		log:    cfg.Logger.With("component", "monty"),
		limits: cfg.limits(),
		done:   make(chan struct{}),
		all:    make(map[*child]struct{}),
		idle:   make(chan *child, cfg.Size),
		snaps:  newSnapshots(cfg.SnapshotScripts),
	}, nil
}

// Start verifies the binary's sha256, self-tests one process (Configure,
// Feed("1 + 1") → 2, Reset) and checks `--version`, then warms Config.Size
// processes. Any failure is returned (ErrBadBinary for a wrong binary) and
// leaves nothing running. ctx bounds the start-up only.
func (p *Pool) Start(ctx context.Context) error {
	p.mu.Lock()
	if p.state != poolNew {
		p.mu.Unlock()
		return errors.New("monty: Start called twice")
	}
	p.state = poolStarted
	p.mu.Unlock()

	err := p.start(ctx)
	if err != nil {
		p.log.Error("monty pool failed to start", "binary", p.cfg.Binary, "err", err)
		p.Stop()
	}
	return err
}

func (p *Pool) start(ctx context.Context) error {
	if err := verifyBinary(p.cfg.Binary, p.cfg.SHA256); err != nil {
		return err
	}
	first, err := p.spawnReady(ctx)
	if err != nil {
		return err
	}
	p.idle <- first
	v, err := binaryVersion(ctx, p.cfg.Binary)
	if want := "monty-runtime " + Version; err != nil || v != want {
		return fmt.Errorf("%w: %s --version = %q (%v), want %q", ErrBadBinary, p.cfg.Binary, v, err, want)
	}
	for i := 1; i < p.cfg.Size; i++ {
		c, err := p.spawnReady(ctx)
		if err != nil {
			return err
		}
		p.idle <- c
	}
	p.log.Info("monty pool started", "binary", p.cfg.Binary, "size", p.cfg.Size)
	return nil
}

// spawnReady starts a process, self-tests it and opens a session, within
// StartTimeout. A process that fails is killed; its error wraps
// ErrBadBinary.
func (p *Pool) spawnReady(ctx context.Context) (*child, error) {
	c, err := spawn(p.cfg.Binary, p.log, defaultFrameLimit)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadBinary, err)
	}
	p.spawned.Add(1)
	p.mu.Lock()
	if p.state != poolStarted {
		p.mu.Unlock()
		c.close()
		return nil, ErrStopped
	}
	p.all[c] = struct{}{}
	p.mu.Unlock()

	ctx, cancel := context.WithTimeout(ctx, p.cfg.StartTimeout)
	defer cancel()
	stop := context.AfterFunc(ctx, c.kill)
	err = c.selfTest() // leaves the child without a session
	if err == nil && p.cfg.SnapshotScripts < 0 {
		err = c.configure(p.limits)
	}
	if !stop() || err != nil {
		p.retire(c)
		if err == nil || ctx.Err() != nil {
			err = fmt.Errorf("self-test did not finish within %v: %w", p.cfg.StartTimeout, ctx.Err())
		}
		return nil, fmt.Errorf("%w: %s failed the self-test: %v", ErrBadBinary, p.cfg.Binary, err)
	}
	return c, nil
}

// retire kills a process and forgets it.
func (p *Pool) retire(c *child) {
	c.close()
	p.mu.Lock()
	delete(p.all, c)
	p.mu.Unlock()
}

// Stop kills every process, including those serving runs (which then fail
// with ErrStopped), and waits until all are reaped. It is safe to call
// before Start and more than once.
func (p *Pool) Stop() {
	p.mu.Lock()
	if p.state == poolStopped {
		p.mu.Unlock()
		return
	}
	wasStarted := p.state == poolStarted
	p.state = poolStopped
	close(p.done)
	for c := range p.all {
		c.kill()
	}
	p.mu.Unlock()
	if !wasStarted {
		return
	}
	p.active.Wait()
	p.bg.Wait()
	p.mu.Lock()
	children := make([]*child, 0, len(p.all))
	for c := range p.all {
		children = append(children, c)
	}
	p.mu.Unlock()
	for _, c := range children {
		p.retire(c)
	}
	p.log.Info("monty pool stopped")
}

// Stats returns the pool's counters.
func (p *Pool) Stats() Stats {
	return Stats{Runs: p.runs.Load(), Spawned: p.spawned.Load(), Recycled: p.recycle.Load(),
		Loaded: p.loaded.Load(), Snapshots: p.snaps.len()}
}

// acquire takes an idle process, waiting for one.
func (p *Pool) acquire(ctx context.Context) (*child, error) {
	select {
	case c := <-p.idle:
		return c, nil
	default:
	}
	select {
	case c := <-p.idle:
		return c, nil
	case <-p.done:
		return nil, ErrStopped
	case <-ctx.Done():
		return nil, fmt.Errorf("%w: waiting for a free interpreter: %w", ErrTimeout, ctx.Err())
	}
}

// release hands a process back after a run. A healthy one gets a fresh
// session in the background and returns to the idle set; a broken or worn
// one is replaced.
func (p *Pool) release(c *child, broken bool) {
	c.runs++
	p.mu.Lock()
	stopped := p.state != poolStarted
	if !stopped {
		p.bg.Add(1)
	}
	p.mu.Unlock()
	if stopped {
		p.retire(c)
		return
	}
	worn := p.cfg.MaxRunsPerProcess > 0 && c.runs >= p.cfg.MaxRunsPerProcess
	go func() {
		defer p.bg.Done()
		if !broken && !worn {
			err := p.renew(c)
			if err == nil {
				p.idle <- c
				return
			}
			select {
			case <-p.done:
			default:
				p.log.Warn("monty session reset failed; replacing the process", "err", err)
			}
		}
		p.recycle.Add(1)
		p.retire(c)
		p.replace()
	}()
}

// renew drops the finished session, bounded by StartTimeout. With
// snapshots a run opens its own session (Load needs no Configure; a Feed
// configures first); without, renew opens the next one here, off the
// next run's path.
func (p *Pool) renew(c *child) error {
	t := time.AfterFunc(p.cfg.StartTimeout, c.kill)
	err := c.reset()
	if err == nil && p.cfg.SnapshotScripts < 0 {
		err = c.configure(p.limits)
	}
	if !t.Stop() && err == nil {
		err = errors.New("session reset timed out")
	}
	return err
}

// replace spawns a process to take a retired one's place, retrying with
// backoff until it succeeds or the pool stops.
func (p *Pool) replace() {
	backoff := 50 * time.Millisecond
	for {
		c, err := p.spawnReady(context.Background())
		if err == nil {
			p.idle <- c
			return
		}
		if errors.Is(err, ErrStopped) {
			return
		}
		p.log.Error("monty: cannot start a replacement process", "err", err, "retry_in", backoff)
		select {
		case <-p.done:
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}
