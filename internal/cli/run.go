// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/trainops/trainops/gitsource"
	"github.com/trainops/trainops/internal/app"
	"github.com/trainops/trainops/internal/check"
	"github.com/trainops/trainops/internal/config"
	"github.com/trainops/trainops/internal/controller"
	"github.com/trainops/trainops/internal/version"
	"github.com/trainops/trainops/internal/workload"
	"github.com/trainops/trainops/render"
)

func runSettings() []setting {
	def := config.DefaultControllers(version.Version)
	return []setting{
		{"kubeconfig", "kubeconfig of the cluster to manage; in-cluster or $KUBECONFIG when empty", ""},
		{"namespace", "trainops's own namespace: inventory, leader lease, secrets named by secretRef", defaultNamespace()},
		{"repo.url", "training-config repository (https://, http:// or ssh://); empty runs the reconcilers only", ""},
		{"repo.branch", "branch to follow (default main)", ""},
		{"repo.tag", "tag to pin instead of a branch", ""},
		{"repo.commit", "commit to pin instead of a branch", ""},
		{"repo.path", "folder of the repository to render", "."},
		{"repo.timeout", "bound on one fetch", 60 * time.Second},
		{"repo.auth.username", "HTTPS username", ""},
		{"repo.auth.passwordFile", "file with the HTTPS password or token", ""},
		{"repo.auth.sshKeyFile", "file with the SSH private key", ""},
		{"repo.auth.sshPassphraseFile", "file with the SSH key's passphrase", ""},
		{"repo.auth.knownHostsFile", "known_hosts file to verify the SSH server", ""},
		{"repo.auth.secretRef", "Secret in trainops's namespace with username, password, identity, identity.passphrase, known_hosts", ""},
		{"repo.auth.insecureSkipHostKeyVerification", "accept any SSH host key (INSECURE: for testing only)", false},
		{"reconcileInterval", "how often the repository is synced again, drift corrected", 10 * time.Minute},
		{"prune", "delete objects removed from Git", true},
		{"pruneBudget", "most objects one sync may prune: a number (20) or a share of the inventory (50%)", "50%"},
		{"allowEmpty", "let a revision that renders nothing prune everything", false},
		{"force", "take back fields another writer changed (drift correction); off reports such conflicts instead", true},
		{"allowedKinds", "kinds the repository may hold (Kind.group, or Kind for core)", config.KindNames(check.DefaultAllowedKinds)},
		{"allowedNamespaces", "namespaces the repository may put objects in (empty: any)", []string{}},
		{"allowedPriorityClasses", "priority classes a PyJob may name, in priorityClassName and, for Kueue, workloadPriorityClassName (empty: any but the system-* classes)", []string{}},
		{"allowTolerateAllTaints", "let a PyJob tolerate every taint (operator Exists with no key), which puts it on control-plane and cordoned nodes", false},
		{"refuseSecretRefs", "refuse PyJobs whose env reads a Secret (valueFrom.secretKeyRef); without it a repository author can put any Secret of a PyJob's namespace into its pods", false},
		{"allowHostNamespaces", "let a PyJob's spec.template share the node's network, PID or IPC namespace (hostNetwork, hostPID, hostIPC)", false},
		{"allowPrivileged", "let a PyJob's spec.template run a privileged container: root on the node", false},
		{"allowAddedCapabilities", "let a PyJob's spec.template add Linux capabilities to a container (securityContext.capabilities.add)", false},
		{"allowHostPath", "let a PyJob's spec.template mount a folder of the node (hostPath volumes)", false},
		{"podSecurityLevel", "Pod Security Standards level every PyJob's pod is held to, however the PyJob was created: baseline, restricted, or privileged (off); a namespace whose pod-security.kubernetes.io/enforce label is stricter gets its label's level; the allow* settings are exceptions on top of it", config.PodSecurityBaseline},
		{"allowNodeName", "let a PyJob's spec.template name its node (spec.nodeName), bypassing the scheduler, cordons and taints", false},
		{"allowReservedTolerations", "let a PyJob tolerate, by key, the taints that keep workloads off a node on purpose: control-plane, node.kubernetes.io/unschedulable and trainops.dev/gpu-unhealthy", false},
		{"allowedVolumeTypes", "volume types a PyJob's spec.template may use beyond emptyDir, configMap, secret, persistentVolumeClaim, downwardAPI and projected (e.g. nfs, csi, ephemeral)", []string{}},
		{"allowedTokenAudiences", "audiences a projected serviceAccountToken of a PyJob's pod may be issued for (empty: only the API server's own)", []string{}},
		{"allowAgentServiceAccounts", "let a PyJob's pod run as an SREAgent's ServiceAccount (sreagent-<name>), with that agent's powers", false},
		{"allowResourceClaims", "let a PyJob's pod claim devices through dynamic resource allocation (resourceClaims), outside its gpu", false},
		{"allowedImageRegistries", "registries (with path) a ClusterPolicy's images may come from: its DaemonSets run privileged on every GPU node", workload.DefaultAllowedRegistries},
		{"protectedNamespaces", "namespaces a sync never writes, added to kube-system, kube-public, kube-node-lease and trainops's own namespace (which are always protected)", []string{}},
		{"syncConcurrency", "parallel API requests while applying", 16},
		{"requireServiceAccount", "refuse a GitSync outside trainops's namespace that names no serviceAccountName (without one it may write only namespaced objects into its own namespace)", false},
		{"maxConcurrentGitSyncs", "GitSyncs synced at once", config.DefaultMaxConcurrentGitSyncs},
		{"maxConcurrentGitSyncsPerNamespace", "GitSyncs of one namespace synced at once (0: half of maxConcurrentGitSyncs), so one team's hanging syncs leave workers to the others", 0},
		{"maxGitSyncTimeout", "bound on every GitSync's spec.timeout, its fetch and its sync: no team holds a worker longer", config.DefaultMaxGitSyncTimeout},
		{"yieldToSyncs", "while any sync writes, let the reconcilers' writes and Events go a few at a time, taking turns by namespace, after the syncs' requests (at once when no sync writes); false lets them write beside the syncs", true},
		{"holdNewObjects", "hold the first reconcile of a sync's own new PyJobs, SREAgents and ClusterPolicies until that sync has applied its revision (at most two minutes): a large revision is applied, then their children are created, rather than both at once; another team's objects never wait", true},
		{"serverDryRunAll", "dry-run new PyJobs, SREAgents and ClusterPolicies on the API server too (default: validated offline with the same code); turn on when other admission policies judge them", false},
		{"cacheDir", "where repositories are cloned", ""},
		{"render.timeout", "bound on one kustomize build; past it the revision is refused", render.DefaultTimeout},
		{"render.memoryLimit", "memory a kustomize build outside the fast path may take (it runs in a child process); past it the revision is refused", "512Mi"},
		{"render.maxBytes", "bound on a revision's files added up (each file is at most 8Mi), on what a render reads and on its output", "64Mi"},
		{"render.loadRestrictor", "kustomize's load restrictor: LoadRestrictionsRootOnly (a kustomization reads files only in or below its own folder, as kustomize does by default) or LoadRestrictionsNone (any file inside the repository); no setting ever reads outside it", config.LoadRestrictionsRootOnly},
		{"render.fastPath", "build the kustomizations of local files, namespace, labels, annotations and patches in trainops's own process with kustomize's filters; false builds every kustomization with krusty in its confined child process", true},
		{"render.reuseChild", "keep the confined child process of a kustomize build outside the fast path warm and build the next kustomization in it, one build at a time, nothing of one kept for the next; false starts a child for each build", true},
		{"decryption.secretRef", "Secret in trainops's namespace whose entries ending in .agekey hold the age identities that decrypt the repository's SOPS-encrypted objects (a GitSync names its own in spec.decryption.secretRef)", ""},
		{"decryption.kinds", "kinds whose SOPS-encrypted objects are decrypted, in the repository and every GitSync's; an encrypted object of another kind is refused", config.KindNames(check.DefaultDecryptKinds)},
		{"commitStatus.provider", "forge to post each revision's outcome to as a commit status: github, gitlab or gitea (empty: none); GitSyncs set their own in spec.commitStatus", ""},
		{"commitStatus.apiURL", "the forge's address (empty: from repo.url; https://api.github.com for github.com)", ""},
		{"commitStatus.secretRef", "Secret in trainops's namespace whose key token may set commit statuses", ""},
		{"alert.provider", "channel to send each revision's outcome to: slack (an incoming webhook taking Slack's payload) or generic (the alert as JSON); empty: none; GitSyncs set their own in spec.alert", ""},
		{"alert.secretRef", "Secret in trainops's namespace whose key address holds the webhook's URL and, for generic, whose optional key key signs each body (HMAC-SHA256 in X-Trainops-Signature)", ""},
		{"webhook.bindAddress", "address of the push webhook (0 turns it off)", "0"},
		{"webhook.secretFile", "file with the webhook's shared secret", ""},
		{"webhook.secretRef", "Secret in trainops's namespace whose key token is the webhook's shared secret", ""},
		{"maxConcurrentReconciles", "objects of one kind reconciled at once", def.MaxConcurrentReconciles},
		{"retryDelay", "wait before retrying a failed sync, or looking again at an object held by something trainops does not manage (a name conflict, a missing prerequisite); failed reconciles back off per object instead", def.RetryDelay},
		{"agentImage", "image SREAgents run when they name none", def.AgentImage},
		{"metricsBindAddress", "address of the Prometheus metrics endpoint (0 turns it off)", "127.0.0.1:8080"},
		{"healthProbeBindAddress", "address of /healthz and /readyz (0 turns it off)", "127.0.0.1:8081"},
		{"leaderElection", "elect a leader so only one replica writes (default on in-cluster)", inCluster()},
		{"shard", "run as a shard: sync only the GitSyncs of the namespaces this label selector picks by their label sharding.trainops.dev/key (a bare NAME means sharding.trainops.dev/key=NAME), with a leader election of its own, and neither the reconcilers nor repo.url; without it trainops syncs the GitSyncs of namespaces without that label. A GitSync's own labels play no part", ""},
		{"shardPolicy", "what a shard enforces: main (the stricter of its own settings and the policy the main Deployment publishes; the shard does not start before it is published) or own (its own settings alone, on purpose)", "main"},
		{"profiling", "serve Go's profiler under /debug/pprof on the metrics address", false},
		{"logFormat", "json or console (default json in-cluster)", map[bool]string{true: "json", false: "console"}[inCluster()]},
	}
}

// inCluster reports whether trainops runs in a pod.
func inCluster() bool { return os.Getenv("KUBERNETES_SERVICE_HOST") != "" }

// defaultNamespace is the pod's namespace in-cluster, else trainops-system.
func defaultNamespace() string {
	if ns := os.Getenv("POD_NAMESPACE"); ns != "" {
		return ns
	}
	if b, err := os.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace"); err == nil && len(b) > 0 {
		return strings.TrimSpace(string(b))
	}
	return "trainops-system"
}

func newRunCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run the PyJob, SREAgent and ClusterPolicy reconcilers against a cluster",
		Long: `Run keeps the cluster in the state the training-config repository describes:
it fetches repo.url, renders it with kustomize, applies it with server-side
apply, prunes what left Git, and re-syncs every reconcileInterval or at once
on a push webhook. In the same process it reconciles PyJobs, SREAgents and the
ClusterPolicy into training Jobs, agent Deployments and GPU DaemonSets.

Settings come from flags, then TRAINOPS_* environment variables, then the
--config file (YAML, keys as below), then defaults. Credentials are read from
files or Secrets, never from the command line.`,
		Args: cobra.NoArgs,
	}
	s := newSettings(cmd, runSettings())
	printCfg := cmd.Flags().Bool("print-config", false, "print the effective configuration (secrets redacted) and exit")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		cfg, err := loadRunConfig(s)
		if *printCfg {
			if perr := printConfig(cmd.OutOrStdout(), s); perr != nil {
				return perr
			}
			return err
		}
		if err != nil {
			return err
		}
		restCfg, err := restConfig(cfg.Kubeconfig)
		if err != nil {
			return err
		}
		ctrl.SetLogger(newLogger(cmd.ErrOrStderr(), cfg.LogFormat == "console"))
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
	var errs []error
	integer := func(k string) int { v, err := s.integer(k); errs = append(errs, err); return v }
	duration := func(k string) time.Duration { v, err := s.duration(k); errs = append(errs, err); return v }
	boolean := func(k string) bool { v, err := s.boolean(k); errs = append(errs, err); return v }
	quantity := func(k string) int64 { v, err := s.bytes(k); errs = append(errs, err); return v }
	cfg := config.Run{
		Kubeconfig: s.str("kubeconfig"),
		Namespace:  s.str("namespace"),
		Controllers: config.Controllers{
			MaxConcurrentReconciles: integer("maxConcurrentReconciles"),
			RetryDelay:              duration("retryDelay"),
			AgentImage:              s.str("agentImage"),
		},
		Repo: config.Repo{
			URL: s.str("repo.url"), Branch: s.str("repo.branch"), Tag: s.str("repo.tag"), Commit: s.str("repo.commit"),
			Path: s.str("repo.path"), Timeout: duration("repo.timeout"),
			Auth: config.RepoAuth{
				Username: s.str("repo.auth.username"), PasswordFile: s.str("repo.auth.passwordFile"),
				SSHKeyFile: s.str("repo.auth.sshKeyFile"), SSHPassphraseFile: s.str("repo.auth.sshPassphraseFile"),
				KnownHostsFile: s.str("repo.auth.knownHostsFile"), SecretRef: s.str("repo.auth.secretRef"),
				InsecureSkipHostKeyVerification: boolean("repo.auth.insecureSkipHostKeyVerification"),
			},
		},
		Webhook: config.Webhook{BindAddress: s.str("webhook.bindAddress"), SecretFile: s.str("webhook.secretFile"), SecretRef: s.str("webhook.secretRef")},
		Sync: config.Sync{
			ReconcileInterval: duration("reconcileInterval"), Prune: boolean("prune"), PruneBudget: s.str("pruneBudget"),
			AllowEmpty: boolean("allowEmpty"), Force: boolean("force"), AllowedKinds: s.strings("allowedKinds"), AllowedNamespaces: nonEmptyStrings(s.strings("allowedNamespaces")),
			ProtectedNamespaces:    nonEmptyStrings(s.strings("protectedNamespaces")),
			AllowedPriorityClasses: nonEmptyStrings(s.strings("allowedPriorityClasses")), AllowTolerateAllTaints: boolean("allowTolerateAllTaints"),
			RefuseSecretRefs: boolean("refuseSecretRefs"), AllowedImageRegistries: nonEmptyStrings(s.strings("allowedImageRegistries")),
			PodPowers: config.PodPowers{AllowHostNamespaces: boolean("allowHostNamespaces"), AllowPrivileged: boolean("allowPrivileged"),
				AllowAddedCapabilities: boolean("allowAddedCapabilities"), AllowHostPath: boolean("allowHostPath"),
				PodSecurityLevel: s.str("podSecurityLevel"), AllowNodeName: boolean("allowNodeName"), AllowReservedTolerations: boolean("allowReservedTolerations"),
				AllowedVolumeTypes: nonEmptyStrings(s.strings("allowedVolumeTypes")), AllowedTokenAudiences: nonEmptyStrings(s.strings("allowedTokenAudiences")),
				AllowAgentServiceAccounts: boolean("allowAgentServiceAccounts"), AllowResourceClaims: boolean("allowResourceClaims")},
			CacheDir: s.str("cacheDir"), Concurrency: integer("syncConcurrency"), ServerDryRunAll: boolean("serverDryRunAll"),
			RequireServiceAccount: boolean("requireServiceAccount"), MaxConcurrentGitSyncs: integer("maxConcurrentGitSyncs"),
			MaxConcurrentGitSyncsPerNamespace: integer("maxConcurrentGitSyncsPerNamespace"), MaxGitSyncTimeout: duration("maxGitSyncTimeout"),
			NoHold: !boolean("holdNewObjects"), NoYield: !boolean("yieldToSyncs"),
		},
		Render: config.Render{
			Timeout: duration("render.timeout"), MemoryLimit: quantity("render.memoryLimit"), MaxBytes: quantity("render.maxBytes"),
			NoFastPath: !boolean("render.fastPath"), FreshChild: !boolean("render.reuseChild"), LoadRestrictor: s.str("render.loadRestrictor"),
		},
		Decryption:     config.Decryption{SecretRef: s.str("decryption.secretRef"), Kinds: nonEmptyStrings(s.strings("decryption.kinds"))},
		CommitStatus:   config.CommitStatus{Provider: s.str("commitStatus.provider"), APIURL: s.str("commitStatus.apiURL"), SecretRef: s.str("commitStatus.secretRef")},
		Alert:          config.Alert{Provider: s.str("alert.provider"), SecretRef: s.str("alert.secretRef")},
		MetricsAddr:    s.str("metricsBindAddress"),
		HealthAddr:     s.str("healthProbeBindAddress"),
		LeaderElection: boolean("leaderElection"),
		Shard:          s.str("shard"),
		ShardPolicy:    s.str("shardPolicy"),
		LogFormat:      s.str("logFormat"),
		Profiling:      boolean("profiling"),
	}
	if err := errors.Join(errs...); err != nil {
		return cfg, err
	}
	return cfg, cfg.Validate()
}

// printConfig writes the effective configuration as YAML. Values are file
// paths and Secret names, never secrets; a password put in a URL is
// redacted.
func printConfig(w io.Writer, s *settings) error {
	out := map[string]any{}
	for _, d := range s.defs {
		v := s.v.Get(d.key)
		if _, isDuration := d.def.(time.Duration); isDuration {
			if dur, err := s.duration(d.key); err == nil {
				v = dur.String()
			}
		}
		if d.key == "repo.url" {
			v = gitsource.Redact(s.str(d.key))
		}
		out[d.key] = v
	}
	b, err := yaml.Marshal(out)
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
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

// kubeClient is a client of trainops's kinds and the built-in ones for the
// kubeconfig at path (see restConfig).
func kubeClient(path string) (client.Client, error) {
	restCfg, err := restConfig(path)
	if err != nil {
		return nil, err
	}
	return clientFor(restCfg)
}

// clientFor is a client of trainops's kinds and the built-in ones for the
// API server of restCfg.
func clientFor(restCfg *rest.Config) (client.Client, error) {
	c, err := client.New(restCfg, client.Options{Scheme: controller.NewScheme()})
	if err != nil {
		return nil, fmt.Errorf("client for %s: %w", restCfg.Host, err)
	}
	return c, nil
}

// nonEmptyStrings drops empty entries (an empty environment variable).
func nonEmptyStrings(in []string) []string {
	var out []string
	for _, s := range in {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}
