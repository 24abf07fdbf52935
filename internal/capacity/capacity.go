// SPDX-License-Identifier: Apache-2.0

// Package capacity plans a change's training Jobs against the GPU quota of
// Kueue's ClusterQueues and the GPUs the nodes offer: which would be
// admitted now, which would wait, and which can never fit. It reads the
// Jobs trainops's builders make (what Kueue itself reads: parallelism ×
// the pod's GPU limits) and the queues and nodes as Kubernetes objects,
// from the repository, a cluster or a saved list of them. It is pure.
package capacity

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	gpuv1alpha1 "github.com/trainops/trainops/api/gpu/v1alpha1"
)

// Results of a Job.
const (
	// Admitted: the ClusterQueue has the GPUs free now (borrowing from
	// its cohort included).
	Admitted = "admitted"
	// Waits: it fits the quota, but not what is free now.
	Waits = "waits"
	// NeverFits: it asks more than the quota (with all it may borrow) or
	// a worker asks more than any node offers.
	NeverFits = "never fits"
	// Unqueued: no queue; the scheduler places it when nodes have room.
	Unqueued = "not queued"
	// Unknown: its queue is not among those read, and may exist where
	// they were not read from.
	Unknown = "unknown"
)

// QueueLabel is the label Kueue reads a Job's LocalQueue from.
const QueueLabel = "kueue.x-k8s.io/queue-name"

// Flavor is one GPU resource of one flavor of a ClusterQueue.
type Flavor struct {
	Name     string `json:"name"`
	Resource string `json:"resource"`
	// Quota is the nominal quota; BorrowingLimit what it may borrow from
	// its cohort (nil: no limit).
	Quota          int64  `json:"quota"`
	BorrowingLimit *int64 `json:"borrowingLimit,omitempty"`
	// InUse is what admitted and reserving workloads hold now (known
	// from a cluster, or a saved list of its objects).
	InUse int64 `json:"inUse"`
	// Planned is what the change's Jobs admitted here add.
	Planned int64 `json:"planned"`
}

// ClusterQueue is a ClusterQueue's GPU quota and use.
type ClusterQueue struct {
	Name   string   `json:"name"`
	Cohort string   `json:"cohort,omitempty"`
	Flavor []Flavor `json:"flavors"`
	// Admitted and Pending count its workloads now.
	Admitted int32 `json:"admittedWorkloads"`
	Pending  int32 `json:"pendingWorkloads"`
}

// Verdict is what becomes of one Job of the change.
type Verdict struct {
	// PyJob is "namespace/name" of the PyJob the Job runs.
	PyJob        string `json:"pyjob"`
	Queue        string `json:"queue,omitempty"`
	ClusterQueue string `json:"clusterQueue,omitempty"`
	Flavor       string `json:"flavor,omitempty"`
	Resource     string `json:"resource,omitempty"`
	// Workers × PerWorker = GPUs.
	Workers   int64  `json:"workers"`
	PerWorker int64  `json:"gpusPerWorker"`
	GPUs      int64  `json:"gpus"`
	Result    string `json:"result"`
	Why       string `json:"why"`
}

// Plan is the capacity plan of a change.
type Plan struct {
	// Source says where the queues and nodes were read.
	Source        string         `json:"source"`
	ClusterQueues []ClusterQueue `json:"clusterQueues"`
	Jobs          []Verdict      `json:"jobs"`
	// NodeOffer is the most of each GPU resource one node offers (none
	// known: no node check).
	NodeOffer map[string]int64 `json:"nodeOffer,omitempty"`

	partial, noKueue bool
}

// Inputs are the objects a plan reads.
type Inputs struct {
	// ClusterQueues and LocalQueues are Kueue's (kueue.x-k8s.io/v1beta2);
	// a repository's replace a cluster's of the same name, their status
	// (what is in use) kept.
	ClusterQueues, LocalQueues []*unstructured.Unstructured
	// Nodes are the cluster's, for the GPUs one node offers.
	Nodes []corev1.Node
	// Policy is the change's ClusterPolicy, when it has one: nodes then
	// offer what the device plugin advertises under its sharing.
	Policy *gpuv1alpha1.ClusterPolicySpec
	// Source names where they were read.
	Source string
	// Partial says the queues are only some of the cluster's (the
	// change's own): a queue not among them is Unknown, not missing.
	Partial bool
	// NoKueue says the cluster serves no Kueue: a queue label does
	// nothing there, and a Job is planned as if it had none.
	NoKueue bool
}

// New plans jobs, in order, against in. A Job the change's earlier Jobs
// leave no room for waits.
func New(in Inputs, jobs []*batchv1.Job) (*Plan, error) {
	p := &Plan{Source: in.Source, NodeOffer: nodeOffer(in.Nodes, in.Policy), partial: in.Partial, noKueue: in.NoKueue}
	for _, u := range in.ClusterQueues {
		cq, err := readClusterQueue(u)
		if err != nil {
			return nil, err
		}
		p.ClusterQueues = append(p.ClusterQueues, cq)
	}
	slices.SortFunc(p.ClusterQueues, func(a, b ClusterQueue) int { return cmp.Compare(a.Name, b.Name) })
	local := map[string]string{}
	for _, u := range in.LocalQueues {
		cq, _, _ := unstructured.NestedString(u.Object, "spec", "clusterQueue")
		local[u.GetNamespace()+"/"+u.GetName()] = cq
	}
	for _, j := range jobs {
		p.Jobs = append(p.Jobs, p.place(j, local, sharing(in.Policy)))
	}
	return p, nil
}

// NeverFit are the verdicts of Jobs that can never run.
func (p *Plan) NeverFit() []Verdict {
	var out []Verdict
	for _, v := range p.Jobs {
		if v.Result == NeverFits {
			out = append(out, v)
		}
	}
	return out
}

// place decides one Job, taking what it is admitted to.
func (p *Plan) place(j *batchv1.Job, local map[string]string, sh *gpuv1alpha1.SharingSpec) Verdict {
	v := Verdict{PyJob: j.Namespace + "/" + owner(j), Queue: j.Labels[QueueLabel], Workers: int64(ptrOr(j.Spec.Parallelism, 1))}
	v.Resource, v.PerWorker = podGPUs(&j.Spec.Template.Spec)
	v.GPUs = v.Workers * v.PerWorker
	if v.PerWorker == 0 {
		v.Result, v.Why = cmp.Or(resultIfQueued(v.Queue), Unqueued), "asks no GPU"
		return v
	}
	if why := p.nodeFit(v, sh); why != "" {
		v.Result, v.Why = NeverFits, why
		return v
	}
	switch {
	case v.Queue == "":
		v.Result, v.Why = Unqueued, "no queue: the scheduler starts each worker when a node has room"
		return v
	case p.noKueue:
		v.Result, v.Why = Unqueued, "the cluster runs no Kueue, so the queue does nothing: the scheduler starts each worker when a node has room"
		return v
	}
	cqName, ok := local[j.Namespace+"/"+v.Queue]
	switch {
	case !ok && p.partial:
		v.Result, v.Why = Unknown, fmt.Sprintf("LocalQueue %s/%s is not in the change: give the cluster (--cluster) or its saved queues (--capacity) to plan it", j.Namespace, v.Queue)
		return v
	case !ok:
		v.Result, v.Why = NeverFits, fmt.Sprintf("LocalQueue %s/%s does not exist (in the change or the cluster): Kueue admits nothing from it", j.Namespace, v.Queue)
		return v
	}
	v.ClusterQueue = cqName
	i := slices.IndexFunc(p.ClusterQueues, func(c ClusterQueue) bool { return c.Name == cqName })
	if i < 0 {
		v.Result, v.Why = NeverFits, fmt.Sprintf("ClusterQueue %s (of LocalQueue %s) does not exist", cqName, v.Queue)
		return v
	}
	return p.admit(v, i)
}

// resultIfQueued is Waits' stand-in for a Job that asks no GPU: the plan
// is about GPUs, so a queued Job without any is admitted as far as it can
// tell.
func resultIfQueued(queue string) string {
	if queue == "" {
		return ""
	}
	return Admitted
}

// nodeFit says why no node can run one worker; "" when one can (or no
// node is known).
func (p *Plan) nodeFit(v Verdict, sh *gpuv1alpha1.SharingSpec) string {
	if ts := timeSlicing(sh, v.Resource); ts != nil && ts.fail && v.PerWorker > 1 {
		return fmt.Sprintf("each worker asks %d shared %s, and the ClusterPolicy's time-slicing sets failRequestsGreaterThanOne: the device plugin refuses more than 1", v.PerWorker, v.Resource)
	}
	if len(p.NodeOffer) == 0 {
		return ""
	}
	if offer := p.NodeOffer[v.Resource]; v.PerWorker > offer {
		if offer == 0 {
			return fmt.Sprintf("each worker asks %d %s, and no node offers any", v.PerWorker, v.Resource)
		}
		return fmt.Sprintf("each worker asks %d %s, and the largest node offers %d", v.PerWorker, v.Resource, offer)
	}
	return ""
}

// admit places v in the first flavor of ClusterQueue i with room, as
// Kueue tries them in order, else says why it waits or never fits.
func (p *Plan) admit(v Verdict, i int) Verdict {
	cq := &p.ClusterQueues[i]
	var most int64
	for k := range cq.Flavor {
		f := &cq.Flavor[k]
		if f.Resource != v.Resource {
			continue
		}
		borrow := p.borrowable(cq, f)
		most = max(most, f.Quota+p.cohortQuota(cq, f))
		if free := f.Quota - f.InUse - f.Planned + borrow; v.GPUs <= free {
			f.Planned += v.GPUs
			v.Result, v.Flavor = Admitted, f.Name
			v.Why = fmt.Sprintf("%d of %d %s free in flavor %s", f.Quota-f.InUse-f.Planned+v.GPUs, f.Quota, v.Resource, f.Name)
			if over := f.InUse + f.Planned - f.Quota; over > 0 {
				v.Why += fmt.Sprintf(", borrowing %d from cohort %s", over, cq.Cohort)
			}
			return v
		}
	}
	switch {
	case most == 0:
		v.Result, v.Why = NeverFits, fmt.Sprintf("ClusterQueue %s has no quota for %s", cq.Name, v.Resource)
	case v.GPUs > most:
		v.Result, v.Why = NeverFits, fmt.Sprintf("asks %d %s (%d workers × %d), more than ClusterQueue %s can ever give (%d)", v.GPUs, v.Resource, v.Workers, v.PerWorker, cq.Name, most)
	default:
		var free int64
		for _, f := range cq.Flavor {
			if f.Resource == v.Resource {
				free = max(free, f.Quota-f.InUse-f.Planned)
			}
		}
		v.Result = Waits
		v.Why = fmt.Sprintf("asks %d %s; ClusterQueue %s has %d free now", v.GPUs, v.Resource, cq.Name, max(free, 0))
		if cq.Pending > 0 {
			v.Why += fmt.Sprintf(", %d workloads pending", cq.Pending)
		}
	}
	return v
}

// cohortQuota is what f's ClusterQueue may ever borrow of f's flavor and
// resource: the rest of its cohort's nominal quota, up to its
// borrowingLimit.
func (p *Plan) cohortQuota(cq *ClusterQueue, f *Flavor) int64 {
	var others int64
	for _, of := range p.lenders(cq, f) {
		others += of.Quota
	}
	if f.BorrowingLimit != nil {
		return min(others, *f.BorrowingLimit)
	}
	return others
}

// borrowable is what f's ClusterQueue may borrow now: its cohort's unused
// quota of the flavor, up to what it may ever borrow less what it does.
func (p *Plan) borrowable(cq *ClusterQueue, f *Flavor) int64 {
	limit := p.cohortQuota(cq, f)
	if limit == 0 {
		return 0
	}
	var unused int64
	for _, of := range p.lenders(cq, f) {
		unused += max(of.Quota-of.InUse-of.Planned, 0)
	}
	borrowed := max(f.InUse+f.Planned-f.Quota, 0)
	return max(min(unused, limit-borrowed), 0)
}

// lenders are the same flavor and resource as f in the other
// ClusterQueues of cq's cohort.
func (p *Plan) lenders(cq *ClusterQueue, f *Flavor) []Flavor {
	if cq.Cohort == "" {
		return nil
	}
	var out []Flavor
	for _, o := range p.ClusterQueues {
		if o.Name == cq.Name || o.Cohort != cq.Cohort {
			continue
		}
		for _, of := range o.Flavor {
			if of.Name == f.Name && of.Resource == f.Resource {
				out = append(out, of)
			}
		}
	}
	return out
}

// isGPU reports whether a resource is an NVIDIA device (nvidia.com/gpu,
// its shared or MIG forms).
func isGPU(name string) bool { return strings.HasPrefix(name, "nvidia.com/") }

// podGPUs is the GPU resource a pod asks and how many: its containers'
// limits summed, or its largest init container's, as the scheduler and
// Kueue count a pod.
func podGPUs(spec *corev1.PodSpec) (string, int64) {
	sum := map[string]int64{}
	for _, c := range spec.Containers {
		for name, q := range c.Resources.Limits {
			if isGPU(string(name)) {
				sum[string(name)] += q.Value()
			}
		}
	}
	for _, c := range spec.InitContainers {
		for name, q := range c.Resources.Limits {
			if isGPU(string(name)) {
				sum[string(name)] = max(sum[string(name)], q.Value())
			}
		}
	}
	names := slices.Sorted(func(yield func(string) bool) {
		for n := range sum {
			if !yield(n) {
				return
			}
		}
	})
	if len(names) == 0 {
		return "nvidia.com/gpu", 0
	}
	return names[0], sum[names[0]]
}

// owner is the name of the PyJob that owns j (its own name if none).
func owner(j *batchv1.Job) string {
	for _, o := range j.OwnerReferences {
		if o.Kind == "PyJob" {
			return o.Name
		}
	}
	return j.Name
}

func ptrOr(p *int32, d int32) int32 {
	if p == nil {
		return d
	}
	return *p
}

// quantity reads a Kubernetes quantity's whole units.
func quantity(q resource.Quantity) int64 { return q.Value() }

// clusterQueueObject is the part of a ClusterQueue (v1beta2) the plan
// reads.
type clusterQueueObject struct {
	Spec struct {
		CohortName     string `json:"cohortName"`
		ResourceGroups []struct {
			Flavors []struct {
				Name      string `json:"name"`
				Resources []struct {
					Name           string             `json:"name"`
					NominalQuota   resource.Quantity  `json:"nominalQuota"`
					BorrowingLimit *resource.Quantity `json:"borrowingLimit"`
				} `json:"resources"`
			} `json:"flavors"`
		} `json:"resourceGroups"`
	} `json:"spec"`
	Status struct {
		FlavorsReservation []struct {
			Name      string `json:"name"`
			Resources []struct {
				Name  string            `json:"name"`
				Total resource.Quantity `json:"total"`
			} `json:"resources"`
		} `json:"flavorsReservation"`
		PendingWorkloads  int32 `json:"pendingWorkloads"`
		AdmittedWorkloads int32 `json:"admittedWorkloads"`
	} `json:"status"`
}

// readClusterQueue reads the GPU quota and use of a ClusterQueue.
func readClusterQueue(u *unstructured.Unstructured) (ClusterQueue, error) {
	raw, err := json.Marshal(u.Object)
	if err != nil {
		return ClusterQueue{}, err
	}
	var o clusterQueueObject
	if err := json.Unmarshal(raw, &o); err != nil {
		return ClusterQueue{}, fmt.Errorf("ClusterQueue %s: %w", u.GetName(), err)
	}
	cq := ClusterQueue{Name: u.GetName(), Cohort: o.Spec.CohortName, Admitted: o.Status.AdmittedWorkloads, Pending: o.Status.PendingWorkloads}
	for _, g := range o.Spec.ResourceGroups {
		for _, f := range g.Flavors {
			for _, r := range f.Resources {
				if !isGPU(r.Name) {
					continue
				}
				fl := Flavor{Name: f.Name, Resource: r.Name, Quota: quantity(r.NominalQuota)}
				if r.BorrowingLimit != nil {
					fl.BorrowingLimit = new(quantity(*r.BorrowingLimit))
				}
				for _, used := range o.Status.FlavorsReservation {
					for _, ur := range used.Resources {
						if used.Name == f.Name && ur.Name == r.Name {
							fl.InUse = quantity(ur.Total)
						}
					}
				}
				cq.Flavor = append(cq.Flavor, fl)
			}
		}
	}
	return cq, nil
}
