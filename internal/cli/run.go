package cli

import (
	"fmt"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/trainops/trainops/internal/app"
	"github.com/trainops/trainops/internal/config"
	"github.com/trainops/trainops/internal/version"
)

func runSettings() []setting {
	def := config.DefaultControllers(version.Version)
	return []setting{
		{"kubeconfig", "kubeconfig", "kubeconfig of the cluster to manage; in-cluster or $KUBECONFIG when empty", ""},
		{"maxConcurrentReconciles", "max-concurrent-reconciles", "objects of one kind reconciled at once", def.MaxConcurrentReconciles},
		{"retryDelay", "retry-delay", "wait before retrying a failed reconcile", def.RetryDelay},
		{"agentImage", "agent-image", "image SREAgents run when they name none", def.AgentImage},
		{"metricsBindAddress", "metrics-bind-address", "address of the Prometheus metrics endpoint (0 turns it off)", "127.0.0.1:8080"},
		{"healthProbeBindAddress", "health-probe-bind-address", "address of /healthz and /readyz (0 turns it off)", "127.0.0.1:8081"},
		{"leaderElect", "leader-elect", "elect a leader so only one replica acts", false},
		{"leaderElectionNamespace", "leader-election-namespace", "namespace of the leader lease (the pod's own in-cluster)", ""},
	}
}

func newRunCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run the PyJob, SREAgent and ClusterPolicy reconcilers against a cluster",
		Long: `Run keeps the cluster's PyJobs, SREAgents and ClusterPolicy reconciled into
training Jobs, agent Deployments and the GPU DaemonSets, until interrupted.`,
		Args: cobra.NoArgs,
	}
	s := newSettings(cmd, runSettings())
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		cfg, err := loadRunConfig(s)
		if err != nil {
			return err
		}
		restCfg, err := restConfig(cfg.Kubeconfig)
		if err != nil {
			return err
		}
		ctrl.SetLogger(zap.New(zap.WriteTo(cmd.ErrOrStderr())))
		ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
		defer stop()
		return app.Run(ctx, cfg, restCfg)
	}
	return cmd
}

func loadRunConfig(s *settings) (config.Run, error) {
	if err := s.load(); err != nil {
		return config.Run{}, err
	}
	workers, err := s.integer("maxConcurrentReconciles")
	if err != nil {
		return config.Run{}, err
	}
	retry, err := s.duration("retryDelay")
	if err != nil {
		return config.Run{}, err
	}
	cfg := config.Run{
		Kubeconfig:              s.str("kubeconfig"),
		Controllers:             config.Controllers{MaxConcurrentReconciles: workers, RetryDelay: retry, AgentImage: s.str("agentImage")},
		MetricsAddr:             s.str("metricsBindAddress"),
		HealthAddr:              s.str("healthProbeBindAddress"),
		LeaderElection:          s.boolean("leaderElect"),
		LeaderElectionNamespace: s.str("leaderElectionNamespace"),
	}
	return cfg, cfg.Validate()
}

// restConfig loads the kubeconfig at path, or in-cluster / $KUBECONFIG /
// ~/.kube/config when path is empty.
func restConfig(path string) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if path != "" {
		rules.ExplicitPath = path
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig: %w", err)
	}
	cfg.Timeout = 30 * time.Second
	return cfg, nil
}
