// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainops/trainops/internal/controller"
	"github.com/trainops/trainops/internal/signature"
	"github.com/trainops/trainops/internal/testenv"
)

// start starts trainops on the bench's repository with its Git cache
// kept between processes.
func (b *bench) start() error { return b.startIn(filepath.Join(b.dir, "git")) }

// startIn starts trainops on the bench's repository with its Git cache in
// cache.
func (b *bench) startIn(cache string) error {
	return b.startArgs(
		"--repo-url="+b.git.URL(b.repoName),
		"--repo-path="+b.layout.Path(),
		"--reconcile-interval=1h",
		"--cache-dir="+cache)
}

// profiled reports whether a profile of trainops is asked for: only then
// does it run with --profiling, which also keeps Go's sampling of
// allocations on (and its memory) as it would be in a cluster with the
// profiler served.
func profiled() bool {
	for _, k := range []string{"BENCH_PROFILE", "BENCH_PROFILE_CHILDREN", "BENCH_HEAP", "BENCH_HEAP_PEAK"} {
		if os.Getenv(k) != "" {
			return true
		}
	}
	return false
}

// startArgs starts trainops with the harness's common flags and extra.
func (b *bench) startArgs(extra ...string) error {
	addr, err := testenv.FreeAddr()
	if err != nil {
		return err
	}
	b.hookAddr = addr
	if b.metricsAddr, err = testenv.FreeAddr(); err != nil {
		return err
	}
	secret := filepath.Join(b.dir, "hook")
	if err := os.WriteFile(secret, []byte(hookSecret), 0o600); err != nil {
		return err
	}
	args := []string{"run",
		"--kubeconfig=" + b.env.Kubeconfig,
		"--namespace=" + inventoryNS,
		"--webhook-bind-address=" + addr,
		"--webhook-secret-file=" + secret,
		"--metrics-bind-address=" + b.metricsAddr,
		"--health-probe-bind-address=0",
		"--leader-election=false",
		"--log-format=json"}
	if profiled() {
		args = append(args, "--profiling")
	}
	b.proc, err = testenv.StartProcess(filepath.Join(b.dir, "trainops.log"), b.bin, append(args, extra...)...)
	if err != nil {
		return err
	}
	b.anon = sampleAnon(b.proc.Pid())
	// Wait for the webhook to listen.
	return poll(30*time.Second, func() (bool, error) {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
		}
		return err == nil, nil
	})
}

func (b *bench) stop() {
	if b.proc == nil {
		return
	}
	b.proc.Stop(20 * time.Second)
	b.proc = nil
}

// hook sends trainops a signed push notification.
func (b *bench) hook() error {
	return signature.Push("http://"+b.hookAddr+"/hook", []byte(hookSecret))
}

// cpuTimes are the CPU seconds each process has used, and when they were
// read.
type cpuTimes struct {
	at    time.Time
	procs map[string]float64
}

// cpu reads the CPU time of trainops, the control plane's processes and
// the harness.
func (b *bench) cpu() cpuTimes {
	out := cpuTimes{at: time.Now(), procs: map[string]float64{}}
	pids := map[string]int{"harness": os.Getpid()}
	for _, name := range []string{"kube-apiserver", "etcd", "kube-controller-manager", "kube-scheduler", "kwok"} {
		if pid := b.env.PID(name); pid != 0 {
			pids[name] = pid
		}
	}
	if b.proc != nil {
		pids["trainops"] = b.proc.Pid()
	}
	for name, pid := range pids {
		_, out.procs[name] = usage(pid)
	}
	// The Git server runs in the harness, and runs git for each fetch:
	// the harness's own CPU and that of the children it waited for.
	out.procs["git server"] = out.procs["harness"] + waitedChildrenCPU()
	return out
}

// waitedChildrenCPU is the CPU time (s) of the harness's children that
// ended and were waited for (cutime and cstime).
func waitedChildrenCPU() float64 {
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return 0
	}
	s := string(b)
	fields := strings.Fields(s[strings.LastIndex(s, ")")+2:])
	cutime, _ := strconv.ParseFloat(fields[13], 64)
	cstime, _ := strconv.ParseFloat(fields[14], 64)
	return (cutime + cstime) / 100 // USER_HZ
}

// debugCPU prints, for BENCH_DEBUG, the cores each process used between
// two readings.
func (b *bench) debugCPU(what string, before, after cpuTimes) {
	if os.Getenv("BENCH_DEBUG") == "" {
		return
	}
	secs := after.at.Sub(before.at).Seconds()
	var parts []string
	for _, name := range []string{"kube-apiserver", "etcd", "kube-controller-manager", "kube-scheduler", "kwok", "trainops", "harness"} {
		if _, ok := after.procs[name]; !ok {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %.2f", name, (after.procs[name]-before.procs[name])/secs))
	}
	fmt.Printf("    %s: cores used over %.2f s: %s\n", what, secs, strings.Join(parts, ", "))
}

// phaseCost is what the machine spent on a phase: the CPU time of the API
// server and etcd, of the controllers (kube-controller-manager,
// kube-scheduler and kwok, where they run) and of the client that drove it
// (trainops, or the floor's harness), and the API requests served.
type phaseCost struct {
	apiServerCPU, controllersCPU, clientCPU, requests float64
}

// costOf is the cost of a phase between two readings of the processes' CPU
// and of the API server's request counts; client names the driving process.
func costOf(before, after cpuTimes, beforeReqs, afterReqs map[string]float64, client string) phaseCost {
	var c phaseCost
	for _, name := range []string{"kube-apiserver", "etcd"} {
		c.apiServerCPU += after.procs[name] - before.procs[name]
	}
	for _, name := range []string{"kube-controller-manager", "kube-scheduler", "kwok"} {
		c.controllersCPU += after.procs[name] - before.procs[name]
	}
	c.clientCPU = after.procs[client] - before.procs[client]
	for k, v := range afterReqs {
		if d := v - beforeReqs[k]; d > 0 {
			c.requests += d
		}
	}
	return c
}

// usage is the peak resident memory (MiB) and CPU time (s) of a process.
func usage(pid int) (float64, float64) {
	rss := memoryOf(pid)["VmHWM"]
	cpu := 0.0
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
		s := string(b)
		fields := strings.Fields(s[strings.LastIndex(s, ")")+2:])
		utime, _ := strconv.ParseFloat(fields[11], 64)
		stime, _ := strconv.ParseFloat(fields[12], 64)
		cpu = (utime + stime) / 100 // USER_HZ
	}
	return rss, cpu
}

// profileSeconds is how long a profile lasts: BENCH_PROFILE_SECONDS, or 10.
func profileSeconds() int {
	if n, err := strconv.Atoi(os.Getenv("BENCH_PROFILE_SECONDS")); err == nil && n > 0 {
		return n
	}
	return 10
}

// profile saves trainops's CPU profile (profileSeconds), for BENCH_PROFILE.
func profile(addr, path string) {
	kind := "profile"
	if strings.HasSuffix(path, ".trace") {
		kind = "trace"
	}
	download("http://"+addr+"/debug/pprof/"+kind+"?seconds="+strconv.Itoa(profileSeconds()), path)
}

// download saves what url answers to path, for a look after the run.
func download(url, path string) {
	resp, err := http.Get(url)
	if err != nil {
		return
	}
	defer resp.Body.Close()
	f, err := os.Create(path)
	if err != nil {
		return
	}
	defer f.Close()
	_, _ = io.Copy(f, resp.Body)
}

// apiserverProfile saves seconds of kube-apiserver's CPU profile to path,
// for BENCH_APISERVER_PROFILE and BENCH_APISERVER_PROFILE_SYNC.
func (b *bench) apiserverProfile(ctx context.Context, path string, seconds int) {
	raw, err := b.cs.CoreV1().RESTClient().Get().AbsPath("/debug/pprof/profile").Param("seconds", strconv.Itoa(seconds)).DoRaw(ctx)
	if err != nil {
		say("  kube-apiserver profile: %v", err)
		return
	}
	_ = os.WriteFile(path, raw, 0o600)
}

// lastLogLine is the last line of a log holding text.
func lastLogLine(path, text string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	last := ""
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, text) {
			last = l
		}
	}
	return last
}

// controlPlane starts a fresh kube-apiserver and etcd, stopping the
// previous ones, and points the harness's clients at it; full also starts
// kube-controller-manager, kube-scheduler and kwok's simulated GPU nodes.
func (b *bench) controlPlane(ctx context.Context, full bool) error {
	if b.env != nil {
		b.env.Stop()
	}
	if full {
		say("  starting kube-apiserver, etcd, the controllers and GPU nodes")
	} else {
		say("  starting kube-apiserver and etcd")
	}
	env, err := testenv.Start(ctx, testenv.Options{Full: full})
	if err != nil {
		return err
	}
	b.env = env
	cfg := rest.CopyConfig(env.Config)
	cfg.QPS = -1 // the floor: no client-side rate limit
	if b.c, err = client.New(cfg, client.Options{Scheme: controller.NewScheme()}); err != nil {
		return err
	}
	if b.cs, err = kubernetes.NewForConfig(cfg); err != nil {
		return err
	}
	b.md, err = metadata.NewForConfig(cfg)
	return err
}

// heapAtPeak saves, for BENCH_HEAP_PEAK, trainops's live heap each time its
// resident memory passes its highest so far by 4 MiB, until stop is called:
// to path, and a copy to path.1, path.2 … each time. The last is what was
// live nearest the peak. Each profile forces a collection, so a run that
// takes them is not one to quote.
func (b *bench) heapAtPeak(path string) (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		high, n := 0.0, 0
		for {
			select {
			case <-done:
				return
			case <-time.After(50 * time.Millisecond):
			}
			m := memoryOf(b.proc.Pid())
			if m["VmRSS"] < high+4 {
				continue
			}
			high = m["VmRSS"]
			n++
			download("http://"+b.metricsAddr+"/debug/pprof/heap?gc=1", path)
			if raw, err := os.ReadFile(path); err == nil {
				_ = os.WriteFile(fmt.Sprintf("%s.%d", path, n), raw, 0o600)
			}
			say("  heap profile %d at %.0f MiB resident (%.0f MiB anonymous, %.0f MiB of files): %s", n, m["VmRSS"], m["RssAnon"], m["RssFile"], path)
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { close(done); <-finished }) }
}

// debugMemory prints, for BENCH_DEBUG, trainops's memory after a phase:
// its peak RSS so far and its anonymous memory now and at most.
func (b *bench) debugMemory(after string) {
	if os.Getenv("BENCH_DEBUG") == "" {
		return
	}
	m := memoryOf(b.proc.Pid())
	fmt.Printf("    memory after %s: peak RSS %.0f MiB, anonymous %.0f MiB (at most %.0f)\n", after, m["VmHWM"], m["RssAnon"], float64(b.anon.Load())/1024)
}

// sampleAnon reads the anonymous memory of process pid every 50 ms until
// it exits, and keeps the highest (KiB): the kernel keeps no peak of it.
func sampleAnon(pid int) *atomic.Int64 {
	peak := &atomic.Int64{}
	go func() {
		for {
			m := memoryOf(pid)
			anon, ok := m["RssAnon"]
			if !ok {
				return
			}
			if kib := int64(anon * 1024); kib > peak.Load() {
				peak.Store(kib)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	return peak
}

// memoryOf is a process's memory now (MiB), by the names of
// /proc/PID/status: VmRSS, RssAnon, RssFile.
func memoryOf(pid int) map[string]float64 {
	out := map[string]float64{}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return out
	}
	for _, l := range strings.Split(string(b), "\n") {
		name, rest, ok := strings.Cut(l, ":")
		f := strings.Fields(rest)
		if !ok || len(f) != 2 || f[1] != "kB" {
			continue
		}
		kb, _ := strconv.ParseFloat(f[0], 64)
		out[name] = kb / 1024
	}
	return out
}
