// SPDX-License-Identifier: Apache-2.0

package testenv

import (
	"sync"
	"time"
)

// supervisor keeps a node daemon running: when it exits while the
// environment runs, it is started again, as systemd's Restart=always does
// on a node. The NVIDIA container toolkit restarts containerd by sending it
// SIGHUP, which ends containerd, and relies on exactly that.
type supervisor struct {
	start func() (*Process, error)
	stop  chan struct{}
	done  chan struct{}

	mu       sync.Mutex
	proc     *Process
	restarts int
	err      error
}

// restartDelay is how long a supervised daemon stays down before it is
// started again (systemd's RestartSec).
const restartDelay = 200 * time.Millisecond

// supervise starts a daemon with start and keeps it running until Stop.
func supervise(start func() (*Process, error)) (*supervisor, error) {
	p, err := start()
	if err != nil {
		return nil, err
	}
	s := &supervisor{start: start, proc: p, stop: make(chan struct{}), done: make(chan struct{})}
	go s.run()
	return s, nil
}

func (s *supervisor) run() {
	defer close(s.done)
	for {
		p := s.current()
		select {
		case <-s.stop:
			return
		case <-p.Done():
		}
		select {
		case <-s.stop:
			return
		case <-time.After(restartDelay):
		}
		next, err := s.start()
		s.mu.Lock()
		if err != nil {
			s.err = err
			s.mu.Unlock()
			return
		}
		s.proc, s.restarts = next, s.restarts+1
		s.mu.Unlock()
	}
}

// current is the daemon's process now.
func (s *supervisor) current() *Process {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc
}

// Restarts is how many times the daemon was started again.
func (s *supervisor) Restarts() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.restarts
}

// Stop ends the supervision, then the daemon.
func (s *supervisor) Stop(grace time.Duration) {
	close(s.stop)
	<-s.done
	s.current().Stop(grace)
}
