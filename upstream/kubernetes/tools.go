//go:build tools

// Package tools names the upstream packages scripts/upstream.sh builds, so that
// `go mod tidy` keeps every module they need in go.mod and go.sum. Never compiled.
package tools

import (
	_ "github.com/onsi/ginkgo/v2/ginkgo"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
	_ "k8s.io/kubernetes/test/e2e"
	_ "k8s.io/kubernetes/test/images/agnhost"
)
