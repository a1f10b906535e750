package main

// `conformance loop`: cluster-autoscaler's main loop in a quiet steady state, replayed serially with
// the CA-faithful client (generation 1.35+), for benchmarks/ca_loop.py. Per loop, as CA 1.36.1 was
// measured to call a server with nothing to scale (1,000 nodes in 3 groups: 5,032 calls a loop):
// one Refresh and one NodeGroups; per group TargetSize (CA asks about three times: cluster state,
// the scale-down pre-filter, the budgets), Nodes and TemplateNodeInfo (the new objects after Refresh
// ask again); per node one NodeGroupForNode (cached for the rest of the loop) and GetOptions
// -options-per-node times (readiness asks twice for the max node startup time, scale-down
// eligibility for the utilization thresholds). The nodes are the instances the server listed before
// the first loop, named as registered Nodes. Prints one JSON object: each loop's seconds and the
// calls made per RPC in one loop.

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"time"

	"cloudprovider-grpc/tests/conformance/caclient"
	apiv1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

type loopReport struct {
	Nodes       int            `json:"nodes"`
	Groups      int            `json:"groups"`
	Seconds     []float64      `json:"seconds"`
	CallsByRPC  map[string]int `json:"calls_per_loop"`
	CallsInLoop int            `json:"calls_in_loop"`
}

func loopMain(args []string) int {
	fs := flag.NewFlagSet("loop", flag.ExitOnError)
	cloudConfig := fs.String("cloud-config", "", "CA cloud-config (YAML: address, ...)")
	loops := fs.Int("loops", 10, "main loops to run")
	optionsPerNode := fs.Int("options-per-node", 4, "GetOptions calls per node per loop")
	targetsPerGroup := fs.Int("targets-per-group", 3, "TargetSize calls per group per loop")
	_ = fs.Parse(args)

	ca, err := caclient.Build(*cloudConfig, caclient.Generations[0])
	if err != nil {
		fmt.Fprintln(os.Stderr, "loop:", err)
		return 1
	}
	defer ca.Close()
	if err := ca.Refresh(); err != nil {
		fmt.Fprintln(os.Stderr, "loop: Refresh:", err)
		return 1
	}
	var nodes []*apiv1.Node
	groups := ca.NodeGroups()
	if len(groups) == 0 {
		fmt.Fprintln(os.Stderr, "loop: the server lists no node group")
		return 1
	}
	for _, g := range groups {
		insts, err := g.Nodes()
		if err != nil {
			fmt.Fprintln(os.Stderr, "loop: Nodes:", err)
			return 1
		}
		for i, inst := range insts {
			nodes = append(nodes, &apiv1.Node{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", g.Id(), i), Labels: map[string]string{"kubernetes.io/os": "linux"}},
				Spec:       apiv1.NodeSpec{ProviderID: inst.Id},
			})
		}
	}
	defaults := caclient.Options{
		ScaleDownUtilizationThreshold: 0.5, ScaleDownGpuUtilizationThreshold: 0.5,
		ScaleDownUnneededTime: 10 * time.Minute, ScaleDownUnreadyTime: 20 * time.Minute, MaxNodeProvisionTime: 15 * time.Minute,
	}
	report := loopReport{Nodes: len(nodes), Groups: len(groups), CallsByRPC: map[string]int{}}
	count := func(rpc string, n int) {
		if len(report.Seconds) == 0 {
			report.CallsByRPC[rpc] += n
		}
	}
	for i := 0; i < *loops; i++ {
		start := time.Now()
		if err := ca.Refresh(); err != nil {
			fmt.Fprintln(os.Stderr, "loop: Refresh:", err)
			return 1
		}
		count("Refresh", 1)
		groups := ca.NodeGroups()
		count("NodeGroups", 1)
		for _, g := range groups {
			for t := 0; t < *targetsPerGroup; t++ {
				if _, err := g.TargetSize(); err != nil {
					fmt.Fprintln(os.Stderr, "loop: TargetSize:", err)
					return 1
				}
			}
			if _, err := g.Nodes(); err != nil {
				fmt.Fprintln(os.Stderr, "loop: Nodes:", err)
				return 1
			}
			if _, err := g.TemplateNodeInfo(); err != nil && err != caclient.ErrNotImplemented {
				fmt.Fprintln(os.Stderr, "loop: TemplateNodeInfo:", err)
				return 1
			}
		}
		count("NodeGroupTargetSize", *targetsPerGroup*len(groups))
		count("NodeGroupNodes", len(groups))
		count("NodeGroupTemplateNodeInfo", len(groups))
		for _, node := range nodes {
			g, err := ca.NodeGroupForNode(node)
			if err != nil || g == nil {
				fmt.Fprintf(os.Stderr, "loop: NodeGroupForNode(%s): %v, %v\n", node.Spec.ProviderID, g, err)
				return 1
			}
			for o := 0; o < *optionsPerNode; o++ {
				if _, err := g.GetOptions(defaults); err != nil && err != caclient.ErrNotImplemented {
					fmt.Fprintln(os.Stderr, "loop: GetOptions:", err)
					return 1
				}
			}
		}
		count("NodeGroupForNode", len(nodes))
		count("NodeGroupGetOptions", *optionsPerNode*len(nodes))
		report.Seconds = append(report.Seconds, time.Since(start).Seconds())
	}
	for _, n := range report.CallsByRPC {
		report.CallsInLoop += n
	}
	out, _ := json.Marshal(report)
	fmt.Println(string(out))
	return 0
}
