package main

// The conformance checks. Each is named after the CA function it exercises (CloudProvider.X /
// NodeGroup.X / PricingModel.X of cluster-autoscaler's cloud-provider interface, as the client in
// package caclient implements them), followed by what it proves, and tagged with the client
// generation it ran under. The "sim" profile adds exact expectations for the documented demo
// groups of `cloudprovider-grpc serve` (README "Setup"): general 4 cpu/16Gi min 1 max 10 with one
// machine at $0.20/h, highmem 8 cpu/64Gi 0..5 at $0.50/h, gpu 8 cpu/32Gi + 1 nvidia.com/gpu 0..3
// tainted nvidia.com/gpu=present:NoSchedule at $2.50/h with option overrides (a max node startup
// time of 20 minutes among them).
//
// This file holds the Suite and what every check uses; the checks themselves are grouped by what
// they exercise: checks_reads.go (groups, templates, options, pricing), checks_provider.go (GPU,
// NodeGroupForNode, Refresh and Cleanup), checks_scaling.go (the size-changing calls) and
// checks_errors.go (the statuses bad requests and a failing cloud answer).

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"cloudprovider-grpc/tests/conformance/caclient"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apiv1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// caDefaults are CA's flag defaults for the per-group options (config/flags.go: 0.5, 0.5, 10m,
// 20m, 15m, and --max-node-startup-time 15m), which the client sends as `defaults` in
// NodeGroupGetOptions (each where its generation declares the field).
var caDefaults = NodeGroupAutoscalingOptions{
	ScaleDownUtilizationThreshold:    0.5,
	ScaleDownGpuUtilizationThreshold: 0.5,
	ScaleDownUnneededTime:            10 * time.Minute,
	ScaleDownUnreadyTime:             20 * time.Minute,
	MaxNodeProvisionTime:             15 * time.Minute,
	MaxNodeStartupTime:               15 * time.Minute,
}

// Suite holds the clients and what earlier checks learnt, for later ones to compare against.
type Suite struct {
	r       *Runner
	gen     caclient.Generation
	ca      *Provider // the client, of the generation under test
	faulty  *Provider // server whose sim group always stocks out (optional)
	profile string
	cfg     *harnessConfig

	groups map[string]*NodeGroup
}

func (s *Suite) sim() bool { return s.profile == "sim" }

// tag names the client generation in every check line.
func (s *Suite) tag() string { return s.gen.Name }

// readsMaxNodeProvision: the generation's schema has a max-node-provision field in the options
// (CA 1.25-1.28 have none and use 0 whatever the server answers: kubernetes/autoscaler#5935).
func (s *Suite) readsMaxNodeProvision() bool {
	const opts = "NodeGroupAutoscalingOptions"
	return s.ca.ca.Declares(opts, "MaxNodeProvisionTime") || s.ca.ca.Declares(opts, "MaxNodeProvisionDuration")
}

// readsMaxNodeStartup: the generation carries the max node startup time (1.37+, field 11).
func (s *Suite) readsMaxNodeStartup() bool {
	return s.ca.ca.Declares("NodeGroupAutoscalingOptions", "maxNodeStartupDuration")
}

// getsOverrides: the generation reads every time the server answers, so a group's overrides are
// served to it. 1.25-1.28 read no max node provision time (kubernetes/autoscaler#5935); 1.35-1.36
// read a max node startup time of 0 (Generation.LosesStartupTime): both are answered no options and
// keep CA's defaults.
func (s *Suite) getsOverrides() bool {
	return s.readsMaxNodeProvision() && !s.gen.LosesStartupTime
}

// wantDefaults: CA's defaults as this generation sends them and reads them back.
func (s *Suite) wantDefaults() NodeGroupAutoscalingOptions {
	want := caDefaults
	if !s.readsMaxNodeStartup() {
		want.MaxNodeStartupTime = 0
	}
	return want
}

func expectCode(err error, want codes.Code, mentions ...string) error {
	if err == nil {
		return fmt.Errorf("expected %s, got success", want)
	}
	st, ok := status.FromError(err)
	if !ok {
		return fmt.Errorf("expected a gRPC status %s, got %v", want, err)
	}
	if st.Code() != want {
		return fmt.Errorf("expected %s, got %s: %s", want, st.Code(), st.Message())
	}
	for _, m := range mentions {
		if !strings.Contains(st.Message(), m) {
			return fmt.Errorf("%s message %q does not mention %q", want, st.Message(), m)
		}
	}
	return nil
}

func testNode(name, providerID string, labels map[string]string) *apiv1.Node {
	return &apiv1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, Annotations: map[string]string{"conformance": "yes"}},
		Spec:       apiv1.NodeSpec{ProviderID: providerID},
	}
}

// testPod is a realistic pending pod: two containers, an init container and pod overhead, as the
// informer would hand it to CA.
func testPod(cpu, mem string) *apiv1.Pod {
	return &apiv1.Pod{
		TypeMeta:   metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{Name: "web-0", Namespace: "default", UID: "0f3c7c2e-conformance", Labels: map[string]string{"app": "web"}},
		Spec: apiv1.PodSpec{
			InitContainers: []apiv1.Container{{Name: "init", Image: "busybox", Resources: apiv1.ResourceRequirements{
				Requests: apiv1.ResourceList{apiv1.ResourceCPU: resource.MustParse("100m")},
			}}},
			Containers: []apiv1.Container{
				{Name: "app", Image: "nginx", Resources: apiv1.ResourceRequirements{Requests: apiv1.ResourceList{
					apiv1.ResourceCPU: resource.MustParse(cpu), apiv1.ResourceMemory: resource.MustParse(mem),
				}}},
				{Name: "sidecar", Image: "envoy", Resources: apiv1.ResourceRequirements{Requests: apiv1.ResourceList{
					apiv1.ResourceCPU: resource.MustParse("100m"), apiv1.ResourceMemory: resource.MustParse("64Mi"),
				}}},
			},
			Tolerations: []apiv1.Toleration{{Key: "nvidia.com/gpu", Operator: apiv1.TolerationOpExists, Effect: apiv1.TaintEffectNoSchedule}},
		},
		Status: apiv1.PodStatus{Phase: apiv1.PodPending},
	}
}

func approx(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func sortedGroups(p *Provider) []*NodeGroup {
	groups := append([]*NodeGroup(nil), p.NodeGroups()...)
	sort.Slice(groups, func(i, j int) bool { return groups[i].Id() < groups[j].Id() })
	return groups
}
