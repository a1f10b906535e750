// Package caclient is a client of the externalgrpc CloudProvider service that behaves as
// cluster-autoscaler's own externalgrpc cloud provider does, one mode per generation of CA's
// client. It is written from the documented facts of that client (its caching, its deadlines, its
// TLS dialling, which fields each release sends and reads and how it reads them, which errors it
// passes up raw), not from CA's code:
//
//   - one connection, every call under one deadline (a fixed 5 s up to 1.28; the cloud-config's
//     grpc_timeout, default 5 s, from 1.29), nothing retried;
//   - NodeGroups and NodeGroupForNode cached until Refresh (an empty NodeGroupForNode answer and any
//     error are not cached); GPULabel and GetAvailableGPUTypes cached for the process after their
//     first success; the template cached on each NodeGroup object, "no template" included;
//   - from 1.29 on, UNIMPLEMENTED mapped to ErrNotImplemented for the optional RPCs (pricing,
//     template, options); before, every error is passed up as the gRPC status it is;
//   - Kubernetes objects encoded and decoded by Kubernetes' own Go code (k8s.io/api).
//
// Sources of these facts: cluster-autoscaler's cloudprovider/externalgrpc README ("Caching") and its
// client files externalgrpc_cloud_provider.go / externalgrpc_node_group.go at the release tags named
// below.
package caclient

import "fmt"

// Generation is one generation of CA's externalgrpc client: the span of CA releases whose client
// behaves the same on the wire. What it sends and reads follows from its schema alone (a field the
// release declares is sent in requests and read from answers the way that release does; a field it
// does not declare is neither); the other differences are the flags below.
type Generation struct {
	// Name is how the suite names the generation (the CA releases it stands for).
	Name string
	// Schema is the release whose externalgrpc.proto the generation speaks (schemas/<Schema>.json).
	Schema string
	// Added are fields the generation declares beyond its Schema file: what a release's notes and
	// review threads show of a proto whose source is not readable here.
	Added []AddedField
	// MapsUnimplemented: UNIMPLEMENTED from PricingNodePrice, PricingPodPrice,
	// NodeGroupTemplateNodeInfo and NodeGroupGetOptions becomes cloudprovider.ErrNotImplemented, which
	// CA treats as "the provider has no opinion". Before 1.29.0 the client returns the raw status
	// (cluster-autoscaler-1.28.7 externalgrpc_node_group.go GetOptions: `return nil, err`;
	// cluster-autoscaler-1.29.0 maps codes.Unimplemented in the same function).
	MapsUnimplemented bool
	// ConfigTimeout: the cloud-config's grpc_timeout sets the deadline of every call. Before 1.29.0
	// the deadline is a fixed 5 s and the key is not read at all (cluster-autoscaler-1.28.7
	// externalgrpc_cloud_provider.go: `grpcTimeout = 5 * time.Second`, no such key in its config).
	ConfigTimeout bool
	// ConfigDialect is how the cloud-config file is parsed: DialectYAMLv2 up to 1.28 (gopkg.in/yaml.v2
	// on `yaml` tags), DialectJSONTags from 1.29 (sigs.k8s.io/yaml: YAML turned into JSON, then
	// decoded on `json` tags), per the imports of externalgrpc_cloud_provider.go at those tags.
	ConfigDialect ConfigDialect
	// LosesStartupTime: the release has a per-group max node startup time (cluster-autoscaler-1.35.0
	// config/autoscaling_options.go:54) that its client never fills from an answer, so it reads 0
	// whenever options are answered (cluster-autoscaler-1.36.1 externalgrpc_node_group.go:319-327;
	// kubernetes/autoscaler#10245). A server can tell it only by its defaults: the Duration fields
	// alone, and no field the release does not declare; the same request with such fields is a newer
	// CA's and may be answered options.
	LosesStartupTime bool
	// ConfigGetters are the per-group getters of CA's node-group config processor that read an
	// option this client transports, each of which calls NodeGroup.GetOptions
	// (processors/nodegroupconfig/node_group_config_processor.go: four at cluster-autoscaler-1.25.0
	// to -1.27.0, whose options have no provision time at all (-1.26.8 config/autoscaling_options.go:
	// 35-47); GetMaxNodeProvisionTime added by -1.27.1, GetIgnoreDaemonSetsUtilization by -1.28.0;
	// 1.35.0 adds GetMaxNodeStartupTime, of the same shape, for an option the client carries only
	// from 1.37). The 1.25-1.28 generation runs the six of 1.28: every one behaves alike.
	ConfigGetters []string
}

// AddedField is one field declared beyond a schema file: Number of message Message (relative to the
// package), named Name, a singular message of type TypeName.
type AddedField struct {
	Message, Name, TypeName string
	Number                  int32
}

// startupDuration is CA 1.37.0's per-group max node startup time. Its release notes list "External
// gRPC: add maxNodeStartupDuration and allowNonAtomicScaleUpToMax ... preserves MaxNodeStartupTime
// returned by NodeGroupGetOptions" (kubernetes/autoscaler#10266, fixing #10245); the PR's review
// thread shows `google.protobuf.Duration maxNodeStartupDuration = 11;` after MaxNodeProvisionDuration
// = 10. The source at the cluster-autoscaler-1.37.0 tag was not readable here, so the number is the
// review thread's; allowNonAtomicScaleUpToMax (a bool) is left out, its number appearing in no text
// we could read. The client sends CA's --max-node-startup-time (15m) there and reads it back, as the
// release notes say 1.37 does.
var startupDuration = AddedField{
	Message: "NodeGroupAutoscalingOptions", Name: "maxNodeStartupDuration", TypeName: "google.protobuf.Duration", Number: 11,
}

// The config processor's getters, by the release that added them.
var (
	gettersSince125 = []string{"ScaleDownUnneededTime", "ScaleDownUnreadyTime", "ScaleDownUtilizationThreshold", "ScaleDownGpuUtilizationThreshold"}
	gettersSince128 = append(append([]string(nil), gettersSince125...), "MaxNodeProvisionTime", "IgnoreDaemonSetsUtilization")
	gettersSince137 = append(append([]string(nil), gettersSince128...), "MaxNodeStartupTime")
)

// Generations, newest first. The boundaries are where the client changes on the wire or in what it
// does with an answer: 1.29.0 (options field 5, the UNIMPLEMENTED mapping, grpc_timeout and the
// JSON-tag config reader), 1.33.0 (options fields 6-7), 1.34.2 (old and new fields both declared),
// 1.35.0 (new fields only), 1.37.0 (options field 11, the max node startup time).
var Generations = []Generation{
	{Name: "1.37+", Schema: "master", Added: []AddedField{startupDuration}, MapsUnimplemented: true, ConfigTimeout: true, ConfigDialect: DialectJSONTags, ConfigGetters: gettersSince137},
	{Name: "1.35-1.36", Schema: "master", LosesStartupTime: true, MapsUnimplemented: true, ConfigTimeout: true, ConfigDialect: DialectJSONTags, ConfigGetters: gettersSince128},
	{Name: "1.34.2", Schema: "v1.34.2", MapsUnimplemented: true, ConfigTimeout: true, ConfigDialect: DialectJSONTags, ConfigGetters: gettersSince128},
	{Name: "1.33-1.34.1", Schema: "v1.33.0", MapsUnimplemented: true, ConfigTimeout: true, ConfigDialect: DialectJSONTags, ConfigGetters: gettersSince128},
	{Name: "1.29-1.32", Schema: "v1.29.0", MapsUnimplemented: true, ConfigTimeout: true, ConfigDialect: DialectJSONTags, ConfigGetters: gettersSince128},
	{Name: "1.25-1.28", Schema: "v1.25.0", MapsUnimplemented: false, ConfigTimeout: false, ConfigDialect: DialectYAMLv2, ConfigGetters: gettersSince128},
}

// Newest is the newest generation (what the benchmarks speak).
func Newest() Generation { return Generations[0] }

// GenerationByName finds a generation by its Name or its Schema release.
func GenerationByName(name string) (Generation, error) {
	for _, g := range Generations {
		if g.Name == name || g.Schema == name {
			return g, nil
		}
	}
	return Generation{}, fmt.Errorf("unknown CA client generation %q", name)
}
