// Command pause is the pod sandbox's process for the realnode tier's containerd (its CRI config
// names the image built from it): it holds the pod's namespaces open and exits on SIGTERM or
// SIGINT. Built static, it is the image's only file (FROM scratch).
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	<-signals
}
