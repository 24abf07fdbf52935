// SPDX-License-Identifier: Apache-2.0

package convert

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/kustomize/kyaml/yaml"
	sigsyaml "sigs.k8s.io/yaml"

	gpuv1alpha1 "github.com/trainops/trainops/api/gpu/v1alpha1"
	"github.com/trainops/trainops/internal/crdschema"
)

// rule maps one field of a GPU Operator ClusterPolicy spec (or of its Helm
// chart's values, which mirror it) to trainops's ClusterPolicy spec.
type rule struct {
	from, to string
	// conv makes the value to set from the field's (nil: as it is).
	conv func(any) (any, error)
}

// rules, in the order they apply; a later rule overwrites an earlier one's
// target, so trainops's own field names win over the GPU Operator's.
var rules = []rule{
	{from: "driver.enabled", to: "driver.enabled"},
	{from: "driver.repo", to: "driver.repository"},
	{from: "driver.repository", to: "driver.repository"},
	{from: "driver.image", to: "driver.image"},
	{from: "driver.version", to: "driver.version"},
	{from: "driver.upgradePolicy.autoUpgrade", to: "driver.upgradePolicy.autoUpgrade"},
	{from: "driver.upgradePolicy.maxUnavailable", to: "driver.upgradePolicy.maxUnavailable", conv: nodeCount},
	{from: "driver.tolerations", to: "driver.tolerations"},
	{from: "toolkit.enabled", to: "containerRuntime.enabled"},
	{from: "operator.defaultRuntime", to: "containerRuntime.runtime"},
	{from: "cdi.enabled", to: "containerRuntime.cdi.enabled"},
	{from: "cdi.default", to: "containerRuntime.cdi.default"},
	{from: "containerRuntime.enabled", to: "containerRuntime.enabled"},
	{from: "containerRuntime.image", to: "containerRuntime.image"},
	{from: "containerRuntime.cdi.enabled", to: "containerRuntime.cdi.enabled"},
	{from: "containerRuntime.runtime", to: "containerRuntime.runtime"},
	{from: "containerRuntime.configPath", to: "containerRuntime.configPath"},
	{from: "containerRuntime.socketPath", to: "containerRuntime.socketPath"},
	{from: "devicePlugin.enabled", to: "devicePlugin.enabled"},
	{from: "devicePlugin.config", to: "devicePlugin.config", conv: devicePluginConfig},
	{from: "dcgmExporter.enabled", to: "dcgm.exporter.enabled"},
	{from: "dcgmExporter.serviceMonitor.enabled", to: "dcgm.exporter.serviceMonitor.enabled"},
	{from: "dcgmExporter.serviceMonitor.interval", to: "dcgm.exporter.serviceMonitor.interval"},
	{from: "dcgm.exporter.enabled", to: "dcgm.exporter.enabled"},
	{from: "dcgm.exporter.image", to: "dcgm.exporter.image"},
	{from: "dcgm.exporter.serviceMonitor.enabled", to: "dcgm.exporter.serviceMonitor.enabled"},
	{from: "dcgm.exporter.serviceMonitor.interval", to: "dcgm.exporter.serviceMonitor.interval"},
	{from: "mig.strategy", to: "migManager.strategy"},
	{from: "migManager.enabled", to: "migManager.enabled"},
	{from: "migManager.strategy", to: "migManager.strategy"},
	{from: "migManager.profiles", to: "migManager.profiles"},
	{from: "gfd.enabled", to: "gfd.enabled"},
	{from: "daemonsets.tolerations", to: "tolerations"},
	{from: "daemonsets.priorityClassName", to: "priorityClassName"},
	{from: "daemonsets.rollingUpdate.maxUnavailable", to: "rollingUpdate.maxUnavailable", conv: nodeCount},
	{from: "nodeSelector", to: "nodeSelector"},
	{from: "tolerations", to: "tolerations"},
	{from: "priorityClassName", to: "priorityClassName"},
	{from: "rollingUpdate.maxUnavailable", to: "rollingUpdate.maxUnavailable", conv: nodeCount},
	{from: "namespace", to: "namespace"},
	{from: "takeOverExisting", to: "takeOverExisting"},
}

// images are the components whose image the GPU Operator gives as
// repository, image and version, and trainops as one reference.
var images = []struct{ from, to string }{
	{"toolkit", "containerRuntime.image"},
	{"devicePlugin", "devicePlugin.image"},
	{"dcgmExporter", "dcgm.exporter.image"},
	{"migManager", "migManager.image"},
	{"gfd", "gfd.image"},
	{"validator", "validator.image"},
}

// notDeployed says why a GPU Operator setting has no trainops field.
var notDeployed = map[string]string{
	"operator":               "trainops is the operator: its own settings are trainops run's configuration",
	"node-feature-discovery": "trainops does not deploy Node Feature Discovery: install it on its own (docs/gpu-nodes.md)",
	"nfd":                    "trainops does not deploy Node Feature Discovery: install it on its own (docs/gpu-nodes.md)",
	"dcgm":                   "trainops runs no standalone DCGM host engine: dcgm-exporter embeds one",
	"nodeStatusExporter":     "trainops does not deploy the node status exporter: ClusterPolicy status reports each component",
	"psp":                    "pod security is the cluster's admission, not the stack's",
	"psa":                    "pod security is the cluster's admission, not the stack's",
	"sandboxWorkloads":       "trainops runs no VM or confidential-computing workloads",
	"vgpuManager":            "trainops runs no VM or confidential-computing workloads",
	"vgpuDeviceManager":      "trainops runs no VM or confidential-computing workloads",
	"vfioManager":            "trainops runs no VM or confidential-computing workloads",
	"kataManager":            "trainops runs no VM or confidential-computing workloads",
	"ccManager":              "trainops runs no VM or confidential-computing workloads",
	"sandboxDevicePlugin":    "trainops runs no VM or confidential-computing workloads",
	"gds":                    "trainops does not deploy GPUDirect Storage",
	"gdrcopy":                "trainops does not deploy GDRCopy",
	"daemonsets":             "trainops's ClusterPolicy sets tolerations, priorityClassName and rollingUpdate for all components; nothing else",
	"driver":                 "trainops's driver takes enabled, repository, image, version, upgradePolicy (autoUpgrade, maxUnavailable) and tolerations; it does not drain nodes or run the driver manager (docs/gpu-nodes.md)",
	"toolkit":                "trainops's toolkit takes enabled, the image, and the runtime's config and socket (containerRuntime)",
	"devicePlugin":           "trainops's device plugin takes enabled, the image and the time-slicing configuration",
	"dcgmExporter":           "trainops's dcgm-exporter takes enabled, the image and the ServiceMonitor's enabled and interval",
	"migManager":             "trainops's MIG manager takes enabled, the image, the strategy and its profiles (migManager.profiles)",
}

// mapSpec maps a GPU Operator ClusterPolicy spec or Helm values (in) to
// trainops's ClusterPolicy spec, noting each field for object id.
func mapSpec(in map[string]any, id string) (map[string]any, []Note, error) {
	out := map[string]any{}
	used := map[string]bool{}
	var notes []Note
	if v, _ := lookup(in, "driver.usePrecompiled"); v == true {
		return nil, nil, fmt.Errorf("%s: driver.usePrecompiled: precompiled drivers (one image per kernel) are not supported: trainops runs the driver image of each GPU node's OS (<version>-<ID><VERSION_ID>, docs/gpu-nodes.md); set it to false", id)
	}
	if v, ok := lookup(in, "toolkit.env"); ok && v != nil {
		used["toolkit.env"] = true
		notes = append(notes, toolkitEnv(v, out, id)...)
	}
	for _, r := range rules {
		v, ok := lookup(in, r.from)
		if !ok || v == nil {
			continue
		}
		used[r.from] = true
		if r.conv != nil {
			var err error
			if v, err = r.conv(v); err != nil {
				return nil, notes, fmt.Errorf("%s: %s: %w", id, r.from, err)
			}
			if v == nil {
				used[r.from] = false // left for the unmapped notes
				continue
			}
		}
		put(out, r.to, v)
		notes = append(notes, Note{Object: id, Action: Mapped, Field: "spec." + r.from, To: "spec." + r.to})
	}
	for _, im := range images {
		ref, fields := imageRef(in, im.from)
		if ref != "" && !tagged(ref) {
			// The chart tags it with its own appVersion; trainops's
			// default image, tagged, stands in.
			for _, f := range fields {
				used[f] = true
			}
			notes = append(notes, Note{Object: id, Action: Defaulted, Field: "spec." + strings.Join(fields, ", spec."), To: "spec." + im.to,
				Reason: ref + " has no version (the chart tags it with its own release): trainops's default image is used"})
			continue
		}
		if ref == "" {
			continue
		}
		for _, f := range fields {
			used[f] = true
		}
		put(out, im.to, ref)
		notes = append(notes, Note{Object: id, Action: Mapped, Field: "spec." + strings.Join(fields, ", spec."), To: "spec." + im.to, Reason: ref})
	}
	for _, leaf := range leaves(in, "") {
		if coveredBy(leaf, used) {
			continue
		}
		reason := notDeployed[strings.SplitN(leaf, ".", 2)[0]]
		if reason == "" {
			reason = "no trainops field"
		}
		notes = append(notes, Note{Object: id, Action: Unmapped, Field: "spec." + leaf, Reason: reason})
	}
	return out, notes, nil
}

// imageRef joins a component's repository, image and version into one
// image reference; fields are the ones it used.
func imageRef(in map[string]any, component string) (ref string, fields []string) {
	get := func(f string) string {
		v, ok := lookup(in, component+"."+f)
		if s, isString := v.(string); ok && isString && s != "" {
			fields = append(fields, component+"."+f)
			return s
		}
		return ""
	}
	repo, image, version := get("repository"), get("image"), get("version")
	switch {
	case image == "":
		return "", nil
	case repo != "":
		ref = strings.TrimSuffix(repo, "/") + "/" + image
	default:
		ref = image
	}
	if version != "" && !strings.Contains(image, ":") {
		ref += ":" + version
	}
	return ref, fields
}

// toolkitEnv maps the toolkit's runtime settings, which the GPU Operator
// passes as environment variables, to containerRuntime's fields.
func toolkitEnv(v any, out map[string]any, id string) []Note {
	fields := map[string]string{"CONTAINERD_CONFIG": "configPath", "CONTAINERD_SOCKET": "socketPath", "RUNTIME": "runtime"}
	list, _ := v.([]any)
	var notes []Note
	for i, e := range list {
		m, _ := e.(map[string]any)
		name, _ := m["name"].(string)
		value, _ := m["value"].(string)
		from := fmt.Sprintf("spec.toolkit.env[%d] (%s)", i, name)
		if f, ok := fields[name]; ok && value != "" {
			put(out, "containerRuntime."+f, value)
			notes = append(notes, Note{Object: id, Action: Mapped, Field: from, To: "spec.containerRuntime." + f})
			continue
		}
		notes = append(notes, Note{Object: id, Action: Unmapped, Field: from, Reason: "the toolkit takes only the runtime, its config file and socket"})
	}
	return notes
}

// devicePluginConfig maps the GPU Operator's devicePlugin.config (a
// ConfigMap's name, a default key, and with the Helm chart the ConfigMap's
// data: one device plugin configuration per key) to trainops's: the
// default key's sharing for every node, the others per node (nodes select
// theirs with the nvidia.com/device-plugin.config label, as with the GPU
// Operator). trainops's own form is kept. nil: nothing to map (a
// ConfigMap named but not given).
func devicePluginConfig(v any) (any, error) {
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("want a map")
	}
	if _, ok := m["sharing"]; ok {
		return m, nil
	}
	if _, ok := m["perNode"]; ok {
		return m, nil
	}
	data, _ := m["data"].(map[string]any)
	if len(data) == 0 {
		return nil, nil
	}
	def, _ := m["default"].(string)
	if def == "" && len(data) == 1 {
		for k := range data {
			def = k
		}
	}
	out := map[string]any{}
	keys := make([]string, 0, len(data))
	for k := range data {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var perNode []any
	for _, k := range keys {
		text, _ := data[k].(string)
		var file map[string]any
		if err := sigsyaml.Unmarshal([]byte(text), &file); err != nil {
			return nil, fmt.Errorf("data.%s: %w", k, err)
		}
		sharing, ok := file["sharing"]
		if !ok {
			continue
		}
		if k == def {
			out["sharing"] = sharing
		} else {
			perNode = append(perNode, map[string]any{"name": k, "sharing": sharing})
		}
	}
	if len(perNode) > 0 {
		out["perNode"] = perNode
	}
	return out, nil
}

// convertPolicyNode maps a GPU Operator ClusterPolicy's spec in place. A
// spec already in trainops's form is left as it is, comments included.
func convertPolicyNode(n *yaml.RNode, id string) ([]Note, error) {
	spec := n.Field("spec")
	if spec == nil {
		return nil, nil
	}
	in, err := toMap(spec.Value)
	if err != nil {
		return nil, err
	}
	out, notes, err := mapSpec(in, id)
	if err != nil || equality.Semantic.DeepEqual(in, out) {
		return notes, err
	}
	node, err := yaml.FromMap(out)
	if err != nil {
		return notes, err
	}
	return notes, n.PipeE(yaml.SetField("spec", node))
}

// HelmValues converts the GPU Operator Helm chart's values.yaml into a
// ClusterPolicy named name, as YAML.
func HelmValues(values []byte, name string, schemas *crdschema.Schemas) ([]byte, []Note, error) {
	var in map[string]any
	if err := sigsyaml.Unmarshal(values, &in); err != nil {
		return nil, nil, fmt.Errorf("values: %w", err)
	}
	id := gpuv1alpha1.ClusterPolicyKind + " " + name
	spec, notes, err := mapSpec(in, id)
	if err != nil {
		return nil, notes, err
	}
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetGroupVersionKind(gpuv1alpha1.GroupVersion.WithKind(gpuv1alpha1.ClusterPolicyKind))
	u.SetName(name)
	if schemas != nil {
		unknown, err := schemas.UnknownFields(u)
		if err != nil {
			return nil, notes, err
		}
		if len(unknown) > 0 {
			return nil, notes, fmt.Errorf("%s: the mapped spec has fields trainops does not know: %s", id, strings.Join(unknown, ", "))
		}
	}
	out, err := sigsyaml.Marshal(u.Object)
	return out, notes, err
}

// lookup reads a dotted path of nested maps.
func lookup(m map[string]any, path string) (any, bool) {
	var cur any = m
	for _, p := range strings.Split(path, ".") {
		mm, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = mm[p]; !ok {
			return nil, false
		}
	}
	return cur, true
}

// put sets a dotted path of nested maps, making the maps on the way.
func put(m map[string]any, path string, v any) {
	parts := strings.Split(path, ".")
	for _, p := range parts[:len(parts)-1] {
		next, ok := m[p].(map[string]any)
		if !ok {
			next = map[string]any{}
			m[p] = next
		}
		m = next
	}
	m[parts[len(parts)-1]] = v
}

// leaves lists the dotted paths of m's values that are not maps (lists
// count as values), sorted; empty maps and nulls are not listed.
func leaves(m map[string]any, prefix string) []string {
	var out []string
	for k, v := range m {
		p := prefix + k
		if sub, ok := v.(map[string]any); ok {
			out = append(out, leaves(sub, p+".")...)
			continue
		}
		if v != nil {
			out = append(out, p)
		}
	}
	sort.Strings(out)
	return out
}

// coveredBy says whether leaf is a used path or inside one.
func coveredBy(leaf string, used map[string]bool) bool {
	for p := leaf; ; {
		if used[p] {
			return true
		}
		i := strings.LastIndex(p, ".")
		if i < 0 {
			return false
		}
		p = p[:i]
	}
}

// tagged reports whether an image reference names a tag or a digest.
func tagged(ref string) bool {
	last := ref[strings.LastIndex(ref, "/")+1:]
	return strings.ContainsAny(last, ":@")
}

// nodeCount reads a maxUnavailable as Kubernetes does: a number, or a
// percentage; the chart's values quote numbers ("1"), which a DaemonSet
// would refuse as a string.
func nodeCount(v any) (any, error) {
	s, ok := v.(string)
	if !ok {
		return v, nil
	}
	if n, err := strconv.Atoi(s); err == nil {
		return int64(n), nil
	}
	return s, nil
}
