package ollamapeer

import (
	"bufio"
	"os"
	"os/exec"
	"testing"
)

// TestProcTreeCPU checks that a process's CPU time counts its children's:
// a child shell burns CPU, says so, and waits on its stdin while the tree
// is read.
func TestProcTreeCPU(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc")
	}
	cmd := exec.Command("sh", "-c", `i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done; echo burned; read x`)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		stdin.Close()
		cmd.Wait()
	}()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || line != "burned\n" {
		t.Fatalf("child said %q, %v", line, err)
	}
	child := procTreeCPU(cmd.Process.Pid)
	if child <= 0 {
		t.Fatalf("child's CPU time %v after its loop, want > 0", child)
	}
	if self := procTreeCPU(os.Getpid()); self < child {
		t.Fatalf("this process's tree %v is below its child's %v", self, child)
	}
	if none := procTreeCPU(-1); none != 0 {
		t.Fatalf("no such process: %v, want 0", none)
	}
}
