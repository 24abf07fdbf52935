// SPDX-License-Identifier: Apache-2.0

package testenv

import (
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// kueueVisibilityService is the Service Kueue's manifests serve the
// visibility API behind (config/components/visibility).
const kueueVisibilityService = "visibility-server"

// KueueVisibilityGroupVersion is the visibility API's group and version the
// test environment registers.
const KueueVisibilityGroupVersion = "v1beta2.visibility.kueue.x-k8s.io"

var apiServiceGVR = schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}

// installKueueVisibility registers Kueue's visibility API with the API
// server's aggregation layer as Kueue's manifests do, but verified: the
// APIService trusts the cluster's CA (Kueue's own skips the check), and
// its Service is an ExternalName for localhost, the one kind of Service the
// aggregation layer reaches without a cluster network. It returns once the
// API server proxies the API's discovery.
func installKueueVisibility(ctx context.Context, cfg *rest.Config, cs kubernetes.Interface, port int, caBundle []byte) error {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: kueueVisibilityService, Namespace: kueueNamespace},
		Spec: corev1.ServiceSpec{
			Type:         corev1.ServiceTypeExternalName,
			ExternalName: "localhost",
			Ports:        []corev1.ServicePort{{Name: "https", Port: int32(port)}},
		},
	}
	if _, err := cs.CoreV1().Services(kueueNamespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("kueue's visibility Service: %w", err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	apiService := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiregistration.k8s.io/v1",
		"kind":       "APIService",
		"metadata":   map[string]any{"name": KueueVisibilityGroupVersion},
		"spec": map[string]any{
			"group":                "visibility.kueue.x-k8s.io",
			"version":              "v1beta2",
			"groupPriorityMinimum": int64(100),
			"versionPriority":      int64(100),
			"caBundle":             base64.StdEncoding.EncodeToString(caBundle),
			"service": map[string]any{
				"name": kueueVisibilityService, "namespace": kueueNamespace, "port": int64(port),
			},
		},
	}}
	if _, err := dyn.Resource(apiServiceGVR).Create(ctx, apiService, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("kueue's visibility APIService: %w", err)
	}
	var last error
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, last = cs.Discovery().RESTClient().Get().AbsPath("/apis/visibility.kueue.x-k8s.io/v1beta2").DoRaw(ctx)
		return last == nil, nil
	})
	if err != nil {
		return fmt.Errorf("kueue's visibility API is not served through the API server: %w (last: %v)", err, last)
	}
	return nil
}

// copyFiles copies each file of files (source to name) into dir.
func copyFiles(dir string, files map[string]string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	for src, name := range files {
		b, err := os.ReadFile(src)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			return err
		}
	}
	return nil
}
