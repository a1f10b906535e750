// Package caclient is a client of the externalgrpc CloudProvider service that behaves as
// cluster-autoscaler's own externalgrpc cloud provider does, one mode per wire generation of CA's
// client. It is written from the documented facts of that client (its caching, its deadlines, its
// TLS dialling, which fields each release sends and reads and how it reads them), not from CA's code:
//
//   - one connection, every call under its own grpc_timeout deadline (default 5 s), nothing retried;
//   - NodeGroups and NodeGroupForNode cached until Refresh (an empty NodeGroupForNode answer and any
//     error are not cached); GPULabel and GetAvailableGPUTypes cached for the process after their
//     first success; the template cached on each NodeGroup object, "no template" included;
//   - UNIMPLEMENTED mapped to ErrNotImplemented for the optional RPCs (pricing, template, options);
//   - Kubernetes objects encoded and decoded by Kubernetes' own Go code (k8s.io/api).
//
// Sources of these facts: cluster-autoscaler's cloudprovider/externalgrpc README ("Caching") and its
// client files externalgrpc_cloud_provider.go / externalgrpc_node_group.go at the releases named
// below, as summarised in the project's research notes.
package caclient

import "fmt"

// Generation is one wire generation of CA's externalgrpc client. What it sends and reads follows
// from its schema alone: a field the release declares is sent (requests) and read (answers) the way
// that release does; a field it does not declare is neither.
type Generation struct {
	// Name is how the suite names the generation (the CA releases it stands for).
	Name string
	// Schema is the release whose externalgrpc.proto the generation speaks (schemas/<Schema>.json).
	Schema string
}

// Generations, newest first. 1.26-1.34.1 share the embedded Kubernetes types; the options' fields 5
// (1.29) and 6-7 (1.33) are the only differences among them, so the 1.33 schema stands for the
// richest of them, and 1.25 (no field 5: kubernetes/autoscaler#5935) for the poorest.
var Generations = []Generation{
	{Name: "1.35+", Schema: "master"},
	{Name: "1.34.2", Schema: "v1.34.2"},
	{Name: "1.26-1.34.1", Schema: "v1.33.0"},
	{Name: "1.25", Schema: "v1.25.0"},
}

// GenerationByName finds a generation by its Name or its Schema release.
func GenerationByName(name string) (Generation, error) {
	for _, g := range Generations {
		if g.Name == name || g.Schema == name {
			return g, nil
		}
	}
	return Generation{}, fmt.Errorf("unknown CA client generation %q", name)
}
