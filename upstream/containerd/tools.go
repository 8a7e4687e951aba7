//go:build tools

// Package tools names the upstream packages scripts/upstream.sh builds, so that
// `go mod tidy` keeps every module they need in go.mod and go.sum. Never compiled.
package tools

import (
	_ "github.com/containerd/containerd/v2/cmd/containerd"
	_ "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2"
	_ "github.com/containerd/containerd/v2/cmd/ctr"
)
