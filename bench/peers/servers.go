package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
)

// ErrUnavailable marks a server that could not be installed or started; the
// peer is skipped with the error's text as the reason.
var ErrUnavailable = errors.New("server unavailable")

// server is one database process started by the bench on loopback.
type server struct {
	name    string
	cmd     *exec.Cmd
	dir     string // temp dir holding the data, removed by stop
	addr    string // host:port on 127.0.0.1
	version string
	exited  chan struct{}
}

// pid is the server's main process (the postmaster for PostgreSQL).
func (s *server) pid() int { return s.cmd.Process.Pid }

// stop asks the server to shut down (SIGTERM for Redis, SIGINT, the fast
// shutdown, for PostgreSQL), kills it after 20 s, and removes its directory.
func (s *server) stop(sig syscall.Signal) {
	if s.cmd.ProcessState == nil {
		_ = s.cmd.Process.Signal(sig)
		select {
		case <-s.exited:
		case <-time.After(20 * time.Second):
			_ = s.cmd.Process.Kill()
			<-s.exited
		}
	}
	_ = os.RemoveAll(s.dir)
}

// start runs cmd with its output in logPath and watches for its exit.
func (s *server) start(logPath string) error {
	logf, err := os.Create(logPath)
	if err != nil {
		return err
	}
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	if s.cmd.SysProcAttr == nil {
		s.cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	// The server dies with the bench even when the bench is killed.
	s.cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	if err := s.cmd.Start(); err != nil {
		logf.Close()
		return err
	}
	s.exited = make(chan struct{})
	go func() {
		_ = s.cmd.Wait()
		logf.Close()
		close(s.exited)
	}()
	return nil
}

// waitReady calls ping until it succeeds, the server exits, or 30 s pass.
func (s *server) waitReady(ctx context.Context, logPath string, ping func(context.Context) error) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		err := ping(pctx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-s.exited:
			return fmt.Errorf("%w: %s exited at start: %s", ErrUnavailable, s.name, tail(logPath))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: %s not answering after 30 s: %v", ErrUnavailable, s.name, err)
		}
	}
}

// tail is the end of a log file, for error messages.
func tail(path string) string {
	b, _ := os.ReadFile(path)
	s := strings.TrimSpace(string(b))
	if len(s) > 600 {
		s = "…" + s[len(s)-600:]
	}
	return s
}

// freePort asks the kernel for an unused loopback port.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// installFailed remembers the packages apt-get could not install in this
// run, so that a second server of the same kind does not try again.
var installFailed = map[string]error{}

// ensurePackage installs a Debian package with apt-get when find fails and
// the bench runs as root with install allowed; it returns find's answer.
func ensurePackage(ctx context.Context, install bool, pkg string, find func() (string, error)) (string, error) {
	if p, err := find(); err == nil {
		return p, nil
	}
	if err := installFailed[pkg]; err != nil {
		return "", err
	}
	p, err := aptInstall(ctx, install, pkg, find)
	if err != nil {
		installFailed[pkg] = err
	}
	return p, err
}

func aptInstall(ctx context.Context, install bool, pkg string, find func() (string, error)) (string, error) {
	if !install {
		return "", fmt.Errorf("%w: %s is not installed (installing is off)", ErrUnavailable, pkg)
	}
	if os.Geteuid() != 0 {
		return "", fmt.Errorf("%w: %s is not installed and the bench is not root (apt-get install %s)", ErrUnavailable, pkg, pkg)
	}
	if _, err := exec.LookPath("apt-get"); err != nil {
		return "", fmt.Errorf("%w: %s is not installed and there is no apt-get", ErrUnavailable, pkg)
	}
	fmt.Printf("peers: installing %s with apt-get\n", pkg)
	aptGet := func() ([]byte, error) {
		cmd := exec.CommandContext(ctx, "apt-get", "install", "-y", "-qq", "--no-install-recommends", pkg)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		return cmd.CombinedOutput()
	}
	if out, err := aptGet(); err != nil {
		// The package lists may be stale or absent: refresh them once.
		if uout, uerr := exec.CommandContext(ctx, "apt-get", "update", "-qq").CombinedOutput(); uerr != nil {
			return "", fmt.Errorf("%w: apt-get update: %v: %s", ErrUnavailable, uerr, strings.TrimSpace(string(uout)))
		}
		if out, err = aptGet(); err != nil {
			return "", fmt.Errorf("%w: apt-get install %s: %v: %s", ErrUnavailable, pkg, err, strings.TrimSpace(string(out)))
		}
	}
	return find()
}

// startRedis starts redis-server on a free loopback port in a temp dir
// without RDB snapshots; with aof, every write goes to the append-only file
// and the file is fsynced once a second (appendfsync everysec, Redis's
// default for AOF), else nothing is persisted.
func startRedis(ctx context.Context, install, aof bool) (*server, error) {
	bin, err := ensurePackage(ctx, install, "redis-server", func() (string, error) { return exec.LookPath("redis-server") })
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "peers-redis-")
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	s := &server{name: "redis-server", dir: dir, addr: fmt.Sprintf("127.0.0.1:%d", port)}
	if out, err := exec.CommandContext(ctx, bin, "--version").Output(); err == nil {
		s.version = versionField(string(out), "v=")
	}
	args := []string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir,
		"--save", "", "--daemonize", "no", "--loglevel", "warning", "--appendonly", "no"}
	if aof {
		args = append(args[:len(args)-1], "yes", "--appendfsync", "everysec")
	}
	s.cmd = exec.Command(bin, args...)
	logPath := filepath.Join(dir, "redis.log")
	if err := s.start(logPath); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("%w: redis-server: %v", ErrUnavailable, err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: s.addr})
	defer rdb.Close()
	if err := s.waitReady(ctx, logPath, func(ctx context.Context) error { return rdb.Ping(ctx).Err() }); err != nil {
		s.stop(syscall.SIGTERM)
		return nil, err
	}
	return s, nil
}

// versionField returns the word after prefix in s ("v=7.0.15 sha=…" → 7.0.15).
func versionField(s, prefix string) string {
	for _, f := range strings.Fields(s) {
		if v, ok := strings.CutPrefix(f, prefix); ok {
			return v
		}
	}
	return strings.TrimSpace(s)
}

// postgresBin finds the directory holding initdb and postgres: Debian's
// /usr/lib/postgresql/<version>/bin (the newest), else pg_config's bindir.
func postgresBin() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(dirs, func(a, b string) int {
		va, _ := strconv.Atoi(filepath.Base(filepath.Dir(a)))
		vb, _ := strconv.Atoi(filepath.Base(filepath.Dir(b)))
		return vb - va
	})
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		dirs = append(dirs, strings.TrimSpace(string(out)))
	}
	for _, d := range dirs {
		if isExec(filepath.Join(d, "initdb")) && isExec(filepath.Join(d, "postgres")) {
			return d, nil
		}
	}
	return "", errors.New("initdb and postgres not found")
}

func isExec(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir() && st.Mode()&0o111 != 0
}

// runAs returns the credential the PostgreSQL processes run under: nobody
// when the bench runs as root (initdb and postgres refuse root), else none.
func runAs() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("nobody")
	if err != nil {
		return nil, fmt.Errorf("%w: running as root and there is no user nobody to run PostgreSQL as: %v", ErrUnavailable, err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}, nil
}

// startPostgres initialises a cluster in a temp dir and runs postgres on a
// free loopback port with the server's default settings (fsync on,
// synchronous_commit on); sessions may turn synchronous_commit off
// themselves.
func startPostgres(ctx context.Context, install bool) (*server, error) {
	bindir, err := ensurePackage(ctx, install, "postgresql", postgresBin)
	if err != nil {
		return nil, err
	}
	cred, err := runAs()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "peers-postgres-")
	if err != nil {
		return nil, err
	}
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
	}
	data := filepath.Join(dir, "data")
	// --no-sync only skips syncing initdb's own files; the server runs
	// with fsync on.
	initdb := exec.CommandContext(ctx, filepath.Join(bindir, "initdb"), "-D", data, "-U", "postgres",
		"-A", "trust", "-E", "UTF8", "--no-sync")
	initdb.Dir = dir
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("%w: initdb: %v: %s", ErrUnavailable, err, strings.TrimSpace(string(out)))
	}
	port, err := freePort()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	s := &server{name: "postgres", dir: dir, addr: fmt.Sprintf("127.0.0.1:%d", port)}
	if out, err := exec.CommandContext(ctx, filepath.Join(bindir, "postgres"), "--version").Output(); err == nil {
		s.version = versionField(string(out), "")
		if _, v, ok := strings.Cut(string(out), "(PostgreSQL) "); ok {
			s.version, _, _ = strings.Cut(v, " ")
		}
	}
	s.cmd = exec.Command(filepath.Join(bindir, "postgres"), "-D", data, "-p", strconv.Itoa(port),
		"-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories="+dir)
	s.cmd.Dir = dir
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	logPath := filepath.Join(dir, "postgres.log")
	if err := s.start(logPath); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("%w: postgres: %v", ErrUnavailable, err)
	}
	if err := s.waitReady(ctx, logPath, func(ctx context.Context) error {
		c, err := pgx.Connect(ctx, s.dsn())
		if err != nil {
			return err
		}
		return c.Close(ctx)
	}); err != nil {
		s.stop(syscall.SIGINT)
		return nil, err
	}
	return s, nil
}

// dsn is the connection string of the PostgreSQL server's postgres database.
func (s *server) dsn() string {
	return "postgres://postgres@" + s.addr + "/postgres?sslmode=disable"
}
