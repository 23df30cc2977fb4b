//go:build tools

// Package tools pins Cluster API v1.10.10's docker infrastructure provider built by
// ../../scripts/build-providers.sh.
package tools

import (
	_ "sigs.k8s.io/cluster-api/test/infrastructure/docker"
)
