// SPDX-License-Identifier: Apache-2.0

package testenv

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Process is a program started by StartProcess: a control-plane process,
// or trainops itself. Its output goes to a log file that is quoted in
// errors when it fails.
type Process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{}
	err     error
}

// spawnRequests serialises process starts through one goroutine locked to
// its OS thread for the life of the program. Pdeathsig fires when the
// *thread* that started a child exits, so starting every child from a thread
// that never exits is what makes "children die with the test binary" hold,
// even when the binary is killed or panics.
var spawnRequests = make(chan spawnRequest)

type spawnRequest struct {
	cmd   *exec.Cmd
	reply chan error
}

func init() {
	go func() {
		runtime.LockOSThread()
		for r := range spawnRequests {
			r.reply <- r.cmd.Start()
		}
	}()
}

// startProc starts bin with args, its output in logDir/<name>.log, and
// env added to this process's environment.
func startProc(name, bin string, args []string, logDir string, env ...string) (*Process, error) {
	p, err := startProcess(filepath.Join(logDir, name+".log"), bin, args, env)
	if err != nil {
		return nil, err
	}
	p.name = name
	return p, nil
}

// StartProcess starts bin with args, its output appended to logPath. It
// dies with this process however that ends, and leads a process group of
// its own (with any children it starts), which Stop and Kill end.
func StartProcess(logPath, bin string, args ...string) (*Process, error) {
	return startProcess(logPath, bin, args, nil)
}

// startProcess is StartProcess with env added to this process's
// environment.
func startProcess(logPath, bin string, args, env []string) (*Process, error) {
	name := filepath.Base(bin)
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	reply := make(chan error)
	spawnRequests <- spawnRequest{cmd: cmd, reply: reply}
	if err := <-reply; err != nil {
		_ = logFile.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Process{name: name, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		_ = logFile.Close()
		close(p.done)
	}()
	return p, nil
}

// Pid is the process's ID.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Done is closed once the process has ended; Err then says how.
func (p *Process) Done() <-chan struct{} { return p.done }

// Err is the process's exit (nil for status 0), once Done is closed.
func (p *Process) Err() error { return p.err }

// Kill ends the process group at once and waits for the process.
func (p *Process) Kill() { p.Stop(0) }

// Exited reports whether the process has ended.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Stop ends the process group: SIGTERM, then SIGKILL after grace (at
// once when grace is 0); it returns once the process has ended.
func (p *Process) Stop(grace time.Duration) {
	if p.Exited() {
		return
	}
	if grace == 0 {
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
		return
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

// failure describes why the process is unhealthy, quoting its log's tail.
func (p *Process) failure(what string) error {
	state := "is still running"
	if p.Exited() {
		state = fmt.Sprintf("exited (%v)", p.err)
	}
	return fmt.Errorf("%s: %s %s; last lines of %s:\n%s", what, p.name, state, p.logPath, tail(p.logPath, 25))
}

// tail returns the last n lines of a file.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// freePort asks the kernel for a free port on 127.0.0.1. Another process can
// take it before it is used; callers retry a start that fails to bind.
func freePort() (int, error) {
	addr, err := FreeAddr()
	if err != nil {
		return 0, err
	}
	_, port, _ := net.SplitHostPort(addr)
	return strconv.Atoi(port)
}

// FreeAddr is a free "127.0.0.1:port" to listen on. Another process can
// take it before it is used.
func FreeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// addrInUse reports whether a failed process's log says its port was taken.
func addrInUse(p *Process) bool {
	return strings.Contains(tail(p.logPath, 40), "address already in use")
}

// waitFor polls check until it returns nil, the process dies, or timeout.
func waitFor(p *Process, what string, timeout time.Duration, check func() error) error {
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		if p != nil && p.Exited() {
			return p.failure(what)
		}
		if last = check(); last == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	err := fmt.Errorf("%s: not ready after %s: %w", what, timeout, last)
	if p != nil {
		return errors.Join(err, p.failure(what))
	}
	return err
}

func itoa(i int) string { return strconv.Itoa(i) }
