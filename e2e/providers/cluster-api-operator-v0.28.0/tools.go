//go:build tools

// Package tools pins the operator's main package so `go mod tidy` keeps its dependencies.
package tools

import _ "sigs.k8s.io/cluster-api-operator/cmd"
