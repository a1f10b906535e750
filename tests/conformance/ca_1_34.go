//go:build ca_1_34

package main

// CA 1.34.1: the legacy wire fields (embedded v1.Node / v1.Pod, meta Time, nanosecond durations).
// BuildExternalGrpc takes config.AutoscalingOptions by value in this generation.

import (
	"k8s.io/autoscaler/cluster-autoscaler/cloudprovider"
	"k8s.io/autoscaler/cluster-autoscaler/cloudprovider/externalgrpc"
	"k8s.io/autoscaler/cluster-autoscaler/config"
)

const caRelease = "1.34.1"

type (
	caCloudProvider             = cloudprovider.CloudProvider
	caNodeGroup                 = cloudprovider.NodeGroup
	Instance                    = cloudprovider.Instance
	NodeGroupAutoscalingOptions = config.NodeGroupAutoscalingOptions
)

const (
	InstanceRunning          = cloudprovider.InstanceRunning
	InstanceCreating         = cloudprovider.InstanceCreating
	InstanceDeleting         = cloudprovider.InstanceDeleting
	OutOfResourcesErrorClass = cloudprovider.OutOfResourcesErrorClass
)

var ErrNotImplemented = cloudprovider.ErrNotImplemented

func caBuildExternalGrpc(cloudConfigPath string) caCloudProvider {
	return externalgrpc.BuildExternalGrpc(config.AutoscalingOptions{CloudConfig: cloudConfigPath},
		cloudprovider.NodeGroupDiscoveryOptions{}, nil)
}
