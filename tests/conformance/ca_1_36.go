//go:build ca_1_36

package main

// CA 1.36.1: the current wire fields (nodeBytes, pod_bytes, google Timestamp and Duration).
// BuildExternalGrpc takes *coreoptions.AutoscalerOptions from 1.35 on.

import (
	"k8s.io/autoscaler/cluster-autoscaler/cloudprovider"
	"k8s.io/autoscaler/cluster-autoscaler/cloudprovider/externalgrpc"
	"k8s.io/autoscaler/cluster-autoscaler/config"
	coreoptions "k8s.io/autoscaler/cluster-autoscaler/core/options"
)

const caRelease = "1.36.1"

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
	return externalgrpc.BuildExternalGrpc(
		&coreoptions.AutoscalerOptions{AutoscalingOptions: config.AutoscalingOptions{CloudConfig: cloudConfigPath}},
		cloudprovider.NodeGroupDiscoveryOptions{}, nil)
}
