//go:build tools

// Package tools pins the cert-manager v1.11.5 binaries built by ../../scripts/build-providers.sh.
package tools

import (
	_ "github.com/cert-manager/cert-manager/cmd/cainjector"
	_ "github.com/cert-manager/cert-manager/cmd/controller"
	_ "github.com/cert-manager/cert-manager/cmd/webhook"
)
