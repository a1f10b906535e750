// Command kube-apiserver is Kubernetes' API server, built from the k8s.io/kubernetes module for the
// test suite's control plane (tests/support/controlplane.py). Only the entry point lives here: the
// server itself is the upstream module, pinned in go.mod.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() {
	os.Exit(cli.Run(app.NewAPIServerCommand()))
}
