// SPDX-License-Identifier: Apache-2.0

package testenv

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// fakeGPUs is a device plugin, over the kubelet's real device-plugin API,
// that advertises GPUs the node does not have: the scheduler and kubelet
// then treat nvidia.com/gpu as on a GPU node, and a container given some
// sees which in NVIDIA_VISIBLE_DEVICES, as the NVIDIA device plugin sets
// it. No device node is passed: there is none.
type fakeGPUs struct {
	pluginapi.UnimplementedDevicePluginServer
	devices []*pluginapi.Device
}

// GetDevicePluginOptions asks for nothing beyond Allocate.
func (f *fakeGPUs) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

// ListAndWatch sends the devices once, then holds the stream open.
func (f *fakeGPUs) ListAndWatch(_ *pluginapi.Empty, s grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	if err := s.Send(&pluginapi.ListAndWatchResponse{Devices: f.devices}); err != nil {
		return err
	}
	<-s.Context().Done()
	return nil
}

// Allocate names the devices given to each container.
func (f *fakeGPUs) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	out := &pluginapi.AllocateResponse{}
	for _, c := range req.ContainerRequests {
		out.ContainerResponses = append(out.ContainerResponses, &pluginapi.ContainerAllocateResponse{
			Envs: map[string]string{"NVIDIA_VISIBLE_DEVICES": strings.Join(c.DevicesIds, ",")},
		})
	}
	return out, nil
}

// startDevicePlugin serves gpus fake GPUs and registers them with the
// kubelet (retrying until its socket answers); the returned function
// stops it.
func startDevicePlugin(ctx context.Context, gpus int) (func(), error) {
	plugin := &fakeGPUs{}
	for i := range gpus {
		plugin.devices = append(plugin.devices, &pluginapi.Device{ID: fmt.Sprintf("GPU-fake-%02d", i), Health: pluginapi.Healthy})
	}
	endpoint := "trainops-fake-gpu.sock"
	sock := filepath.Join(pluginapi.DevicePluginPath, endpoint)
	// The kubelet makes the folder, and its socket, as it starts.
	deadline := time.Now().Add(time.Minute)
	for _, err := os.Stat(pluginapi.KubeletSocket); err != nil; _, err = os.Stat(pluginapi.KubeletSocket) {
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("device plugin: the kubelet made no %s: %w", pluginapi.KubeletSocket, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	_ = os.Remove(sock)
	l, err := net.Listen("unix", sock)
	if err != nil {
		return nil, fmt.Errorf("device plugin: %w", err)
	}
	srv := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(srv, plugin)
	go func() { _ = srv.Serve(l) }()
	for {
		err = register(ctx, endpoint)
		if err == nil {
			return srv.Stop, nil
		}
		if time.Now().After(deadline) {
			srv.Stop()
			return nil, fmt.Errorf("register the fake GPU device plugin with the kubelet: %w", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// register registers the plugin at endpoint for nvidia.com/gpu.
func register(ctx context.Context, endpoint string) error {
	conn, err := grpc.NewClient("unix://"+pluginapi.KubeletSocket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version: pluginapi.Version, Endpoint: endpoint, ResourceName: string(GPUResource),
	})
	return err
}
