//go:build tools

// Package tools pins kustomize, built by ../../scripts/build-providers.sh.
package tools

import (
	_ "sigs.k8s.io/kustomize/kustomize/v5"
)
