//go:build ca_master

package main

// CA master: the current wire fields; CA's core moved to module sigs.k8s.io/cluster-autoscaler, the
// externalgrpc provider stayed in k8s.io/autoscaler/cluster-autoscaler.
// BuildExternalGrpc takes *coreoptions.AutoscalerOptions from 1.35 on.

import (
	"k8s.io/autoscaler/cluster-autoscaler/cloudprovider/externalgrpc"
	"sigs.k8s.io/cluster-autoscaler/pkg/cloudprovider"
	"sigs.k8s.io/cluster-autoscaler/pkg/config"
	coreoptions "sigs.k8s.io/cluster-autoscaler/pkg/core/options"
)

const caRelease = "master"

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
