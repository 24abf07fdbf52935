// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/trainops/trainops/internal/agent"
)

func newAgentCommand() *cobra.Command {
	opts := agent.Options{Thresholds: agent.DefaultThresholds()}
	var kubeconfig string
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Run the SRE agent an SREAgent deploys",
		Long: `Agent watches one namespace with the ServiceAccount its SREAgent created.
Every --monitor-interval it finds containers in CrashLoopBackOff,
ImagePullBackOff or OOMKilled, pods pending too long (with the scheduler's
reason) and failed PyJobs, and with --gpu GPUs with XID errors, too hot or
nearly out of memory from the DCGM exporter. Each finding is announced once:
a Kubernetes Event on the object, a metric on /metrics and a JSON log line;
the findings of the last inspection and the latest repairs are written to
the status of the --sreagent SREAgent. With --auto-repair it deletes crash-looping pods that a controller will
recreate, at most --max-repairs per interval (--dry-run only reports).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if opts.Namespace == "" {
				return &exitError{code: ExitUsage, msg: "Error: --namespace is required (the SREAgent's Deployment passes it)"}
			}
			if opts.Interval < time.Second {
				return &exitError{code: ExitUsage, msg: fmt.Sprintf("Error: --monitor-interval %s is too short", opts.Interval)}
			}
			if opts.Instance == "" {
				opts.Instance, _ = os.Hostname()
			}
			c, err := kubeClient(kubeconfig)
			if err != nil {
				return err
			}
			log := newLogger(cmd.ErrOrStderr(), !inCluster())
			ctrl.SetLogger(log)
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			return agent.New(c, opts, log.WithName("agent")).Run(ctx)
		},
	}
	f := cmd.Flags()
	f.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig; in-cluster when empty")
	f.StringVar(&opts.Namespace, "namespace", os.Getenv("POD_NAMESPACE"), "namespace to watch")
	f.DurationVar(&opts.Interval, "monitor-interval", 15*time.Second, "how often to inspect")
	f.BoolVar(&opts.AutoRepair, "auto-repair", false, "delete crash-looping pods owned by a controller")
	f.BoolVar(&opts.DryRun, "dry-run", false, "with --auto-repair, report the deletions without making them")
	f.IntVar(&opts.MaxRepairs, "max-repairs", 3, "most pods deleted per interval")
	f.Int32Var(&opts.Thresholds.Restarts, "restart-threshold", opts.Thresholds.Restarts, "restarts before a crash-looping pod is repaired")
	f.DurationVar(&opts.Thresholds.Pending, "pending-threshold", opts.Thresholds.Pending, "how long a pod may stay Pending")
	f.BoolVar(&opts.GPU, "gpu", false, "also watch GPU health from the DCGM exporter")
	f.StringVar(&opts.DCGMURL, "dcgm-url", "", "DCGM exporter metrics address (an SREAgent's Deployment names the active ClusterPolicy's); empty: no GPU checks")
	f.Float64Var(&opts.Thresholds.GPUTemperature, "gpu-temperature-threshold", opts.Thresholds.GPUTemperature, "GPU temperature (°C) to report")
	f.Float64Var(&opts.Thresholds.GPUMemory, "gpu-memory-threshold", opts.Thresholds.GPUMemory, "used share of GPU memory (0-1) to report")
	f.StringVar(&opts.Listen, "listen", ":8080", "address of /healthz and /metrics (0 turns it off)")
	f.StringVar(&opts.Instance, "instance", "", "name of this agent in Events (default the host name)")
	f.StringVar(&opts.SREAgent, "sreagent", "", "the SREAgent (in --namespace) whose status gets the findings and actions; empty: none")
	return cmd
}
