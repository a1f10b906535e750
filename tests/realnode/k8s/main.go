// Command k8s-node is the kubelet, kube-proxy, kube-scheduler and kube-controller-manager of the
// realnode test tier in one executable, built from the k8s.io/kubernetes module
// (tests/support/controlplane.py). One binary rather than four: they share most of their packages,
// and each link of a Kubernetes binary costs about as much CPU as compiling the packages only it
// needs. The first argument names the component; the rest are that component's own flags. Only the
// entry point lives here: the components themselves are the upstream module, pinned in go.mod.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client metrics, as the upstream mains register them
	_ "k8s.io/component-base/metrics/prometheus/version"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	proxy "k8s.io/kubernetes/cmd/kube-proxy/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
	kubelet "k8s.io/kubernetes/cmd/kubelet/app"
)

func main() {
	commands := map[string]func() *cobra.Command{
		"kubelet":                 func() *cobra.Command { return kubelet.NewKubeletCommand(context.Background()) },
		"kube-scheduler":          func() *cobra.Command { return scheduler.NewSchedulerCommand() },
		"kube-controller-manager": controllermanager.NewControllerManagerCommand,
		"kube-proxy":              proxy.NewProxyCommand,
	}
	if len(os.Args) < 2 || commands[os.Args[1]] == nil {
		fmt.Fprintln(os.Stderr, "usage: k8s-node kubelet|kube-scheduler|kube-controller-manager|kube-proxy [flags]")
		os.Exit(2)
	}
	command := commands[os.Args[1]]()
	os.Args = append([]string{os.Args[1]}, os.Args[2:]...)
	os.Exit(cli.Run(command))
}
