//go:build tools

// Package tools pins the Cluster API v1.14.2 managers built by ../../scripts/build-providers.sh.
// v1.14 moved the core manager's main package to core/ and the API types to their own module
// (sigs.k8s.io/cluster-api/api, which the root module reaches through a replace directive that
// only applies inside its own repository: required here at the same version).
package tools

import (
	_ "sigs.k8s.io/cluster-api/bootstrap/kubeadm"
	_ "sigs.k8s.io/cluster-api/controlplane/kubeadm"
	_ "sigs.k8s.io/cluster-api/core"
)
