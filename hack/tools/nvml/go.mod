module github.com/trainops/trainops/hack/tools/nvml

// This module builds a stand-in for the NVIDIA driver's libnvidia-ml.so.1
// that answers from go-nvml's own mock of a DGX A100, at the go-nvml the
// device plugin v0.17.4 builds with. It is kept apart so none of it enters
// the project's go.mod.

go 1.26.0

require github.com/NVIDIA/go-nvml v0.12.9-0

require github.com/google/uuid v1.6.0 // indirect
