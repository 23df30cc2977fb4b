//go:build tools

// Package tools pins the Cluster API v1.13.6 managers built by ../../scripts/build-providers.sh.
package tools

import (
	_ "sigs.k8s.io/cluster-api"
	_ "sigs.k8s.io/cluster-api/bootstrap/kubeadm"
	_ "sigs.k8s.io/cluster-api/controlplane/kubeadm"
)
