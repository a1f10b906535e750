package main

// `conformance loop`: cluster-autoscaler's main loop replayed serially with the CA-faithful client
// (generation 1.35-1.36), for benchmarks/ca_loop.py and tests/test_ca_loop.py. What one loop asks, as
// CA 1.36.1's code does it (k8s.io/autoscaler, cluster-autoscaler/ at tag cluster-autoscaler-1.36.1):
//
//   - one Refresh, then NodeGroups (cached by the client until the next Refresh);
//   - the instance lists come from CA's cache (clusterstate/utils/node_instances_cache.go): groups
//     missing from it are fetched in parallel inside the loop (the first loop, and a group whose
//     entry was dropped after a deletion); every 2 minutes a background refresh lists every group
//     one after the other, beside the loops, never inside one;
//   - per registered node NodeGroupForNode: once per loop for a node in a group (the client caches the
//     answer until Refresh), -fornode-per-ungrouped times for a node in no group (the client does not
//     cache an empty answer), by default as -ca asks: 6 on 1.36 (the template provider 1, cluster
//     state's readiness 2, the scale-down pre-filter 1, the quota tracker new in 1.36 1, the soft-taint
//     filter 1; eligibility never sees such a node), 5 on 1.35, 4 on 1.34;
//   - TemplateNodeInfo only for a group with no usable node that never had one: a group that had a
//     node in an earlier loop is served from CA's node-info cache
//     (processors/nodeinfosprovider/mixed_nodeinfos_processor.go:123-145); with -csi-aware, up to one
//     per group object NodeGroupForNode returned (the upper bound: one per node in a group);
//   - TargetSize -targets-per-group times per group; GetOptions -options-per-node times per node in a
//     group (measured: about 4 per node at 1,000 nodes);
//   - GPULabel once per process (cached after its first success); GetAvailableGPUTypes never: CA asks
//     it only when it executes a scale-up, deletes nodes it scaled down or records a failed scale-up
//     (core/scaleup/orchestrator/executor.go:82,113, core/scaledown/actuation/delete_in_batch.go:220,
//     observers/nodegroupchange/scale_state_observer.go:128), none of which a quiet loop does;
//   - instances listed but never registered (-unregistered N creates N before the first loop) are
//     deleted as CA deletes them (core/static_autoscaler.go removeOldUnregisteredNodes) through fake
//     nodes (clusterstate.FakeNode): name and providerID the instance id, annotated
//     k8s.io/cluster-autoscaler/fake-node-reason=unregistered (cloudprovider.FakeNodeReasonAnnotation).
//     Each is asked NodeGroupForNode and GetOptions, then per group TargetSize, GetOptions and one
//     DeleteNodes; the group's cache entry is dropped, so the next loop lists it again. The server's
//     answer is checked (one TargetSize and one Nodes more): the target size went down by the number
//     deleted and no deleted instance is listed as anything but deleting;
//   - with -price-expander, every loop evaluates a scale-up for -pending-pods pods and the price
//     expander prices one stabilization pod (expander/price/price.go:107), then each group: NodePrice
//     of the sanitized template node, named template-node-for-<group>-<random>, and PodPrice of each
//     pod, over now..now+1h (the option chosen is not applied: the cluster stays as it is).
//
// The cluster: the instances the server lists before the first loop, registered as Nodes, plus
// nodes in no group (-non-autoscaled-share of all nodes). The loops run back to back; the simulated
// clock advances -scan-interval per loop and drives the background refresh. Prints one JSON object:
// each loop's seconds and, per loop, the calls made per RPC (a background refresh counted in the loop
// it started in), and the calls made before the first loop.
//
// This file holds the model, its flags and the loop; the deletion of unregistered instances and the
// price expander's evaluation are in loop_actions.go.

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand"
	"os"
	"sync"
	"time"

	"cloudprovider-grpc/tests/conformance/caclient"
	apiv1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// nodesCacheRefresh is CloudProviderNodeInstancesCacheRefreshInterval.
const nodesCacheRefresh = 2 * time.Minute

type loopModel struct {
	loops, targetsPerGroup, optionsPerNode, forNodeUngrouped, pendingPods, unregistered int
	nonAutoscaledShare                                                                  float64
	priceExpander, csiAware                                                             bool
	scanInterval                                                                        time.Duration
}

type loopReport struct {
	Nodes         int              `json:"nodes"`
	NonAutoscaled int              `json:"non_autoscaled"`
	Groups        int              `json:"groups"`
	Seconds       []float64        `json:"seconds"`
	Calls         []map[string]int `json:"calls"`
	Setup         map[string]int   `json:"setup_calls"`
	FakeDeleted   int              `json:"fake_nodes_deleted"`
}

// tally counts the calls that reach the wire, per loop (-1: before the first loop).
type tally struct {
	mu    sync.Mutex
	setup map[string]int
	loops []map[string]int
}

func (t *tally) add(loop int, rpc string, n int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if loop < 0 {
		t.setup[rpc] += n
		return
	}
	for len(t.loops) <= loop {
		t.loops = append(t.loops, map[string]int{})
	}
	t.loops[loop][rpc] += n
}

// instancesCache is CA's cache of the groups' instance lists.
type instancesCache struct {
	mu      sync.Mutex
	byGroup map[string][]caclient.Instance
}

func (c *instancesCache) set(id string, insts []caclient.Instance) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.byGroup[id] = insts
}

func (c *instancesCache) get(id string) ([]caclient.Instance, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	insts, ok := c.byGroup[id]
	return insts, ok
}

func (c *instancesCache) drop(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.byGroup, id)
}

type replay struct {
	m          loopModel
	ca         *caclient.CloudProvider
	calls      *tally
	cache      *instancesCache
	grouped    []*apiv1.Node
	ungrouped  []*apiv1.Node
	registered map[string]bool
	defaults   caclient.Options
	pod        *apiv1.Pod
	rng        *rand.Rand
	fake       int
	hadNode    map[string]bool // groups that had a usable node in some loop: CA caches their node info
}

// forNodeUngroupedByCA: NodeGroupForNode asks per loop for a node in no group, by CA minor release.
var forNodeUngroupedByCA = map[string]int{"1.36": 6, "1.35": 5, "1.34": 4}

func loopMain(args []string) int {
	fs := flag.NewFlagSet("loop", flag.ExitOnError)
	cloudConfig := fs.String("cloud-config", "", "CA cloud-config (YAML: address, ...)")
	var m loopModel
	fs.IntVar(&m.loops, "loops", 10, "main loops to run")
	fs.IntVar(&m.optionsPerNode, "options-per-node", 4, "GetOptions calls per node in a group per loop")
	fs.IntVar(&m.targetsPerGroup, "targets-per-group", 3, "TargetSize calls per group per loop")
	release := fs.String("ca", "1.36", "the CA minor release whose call pattern to replay: 1.36, 1.35 or 1.34")
	fs.IntVar(&m.forNodeUngrouped, "fornode-per-ungrouped", -1, "NodeGroupForNode calls per loop for a node in no group (default: as -ca asks)")
	fs.Float64Var(&m.nonAutoscaledShare, "non-autoscaled-share", 0, "share of all nodes that are in no group (0..0.9)")
	fs.BoolVar(&m.priceExpander, "price-expander", false, "every loop evaluates a scale-up priced by the price expander")
	fs.IntVar(&m.pendingPods, "pending-pods", 3, "pods the price expander prices per group (with -price-expander)")
	fs.BoolVar(&m.csiAware, "csi-aware", false, "--enable-csi-node-aware-scheduling: templates asked of NodeGroupForNode's groups")
	fs.IntVar(&m.unregistered, "unregistered", 0, "instances created before the first loop that never register")
	fs.DurationVar(&m.scanInterval, "scan-interval", 10*time.Second, "simulated time per loop (drives the 2-minute instance refresh)")
	_ = fs.Parse(args)
	if m.forNodeUngrouped < 0 {
		n, ok := forNodeUngroupedByCA[*release]
		if !ok {
			fmt.Fprintf(os.Stderr, "loop: -ca %q: want 1.36, 1.35 or 1.34\n", *release)
			return 2
		}
		m.forNodeUngrouped = n
	}
	if m.nonAutoscaledShare < 0 || m.nonAutoscaledShare > 0.9 || m.scanInterval <= 0 || m.loops < 1 {
		fmt.Fprintln(os.Stderr, "loop: -non-autoscaled-share must be in 0..0.9, -scan-interval and -loops positive")
		return 2
	}
	gen, err := caclient.GenerationByName("1.35-1.36") // the client of CA 1.36.1, whose loop this replays
	if err != nil {
		fmt.Fprintln(os.Stderr, "loop:", err)
		return 1
	}
	ca, err := caclient.Build(*cloudConfig, gen)
	if err != nil {
		fmt.Fprintln(os.Stderr, "loop:", err)
		return 1
	}
	defer ca.Close()
	r := &replay{
		m: m, ca: ca, calls: &tally{setup: map[string]int{}},
		cache:      &instancesCache{byGroup: map[string][]caclient.Instance{}},
		registered: map[string]bool{}, hadNode: map[string]bool{},
		defaults: caclient.Options{
			ScaleDownUtilizationThreshold: 0.5, ScaleDownGpuUtilizationThreshold: 0.5,
			ScaleDownUnneededTime: 10 * time.Minute, ScaleDownUnreadyTime: 20 * time.Minute, MaxNodeProvisionTime: 15 * time.Minute,
		},
		pod: pendingPod(), rng: rand.New(rand.NewSource(1)),
	}
	report, err := r.run()
	if err != nil {
		fmt.Fprintln(os.Stderr, "loop:", err)
		return 1
	}
	out, _ := json.Marshal(report)
	fmt.Println(string(out))
	return 0
}

// setup registers the cluster's Nodes and creates the unregistered instances.
func (r *replay) setup() error {
	if err := r.ca.Refresh(); err != nil {
		return fmt.Errorf("Refresh: %w", err)
	}
	r.calls.add(-1, "Refresh", 1)
	groups := r.ca.NodeGroups()
	r.calls.add(-1, "NodeGroups", 1)
	if len(groups) == 0 {
		return errors.New("the server lists no node group")
	}
	for _, g := range groups {
		insts, err := g.Nodes()
		r.calls.add(-1, "NodeGroupNodes", 1)
		if err != nil {
			return fmt.Errorf("Nodes: %w", err)
		}
		for i, inst := range insts {
			if inst.Status != nil && inst.Status.State == caclient.InstanceDeleting {
				continue // on its way out: its Node is gone
			}
			r.registered[inst.Id] = true
			r.grouped = append(r.grouped, &apiv1.Node{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", g.Id(), i), Labels: map[string]string{"kubernetes.io/os": "linux"}},
				Spec:       apiv1.NodeSpec{ProviderID: inst.Id},
			})
		}
	}
	share := r.m.nonAutoscaledShare
	ungrouped := int(math.Round(float64(len(r.grouped)) * share / (1 - share)))
	for i := 0; i < ungrouped; i++ {
		name := fmt.Sprintf("static-%d", i)
		r.ungrouped = append(r.ungrouped, &apiv1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/os": "linux"}},
			Spec:       apiv1.NodeSpec{ProviderID: "static://" + name},
		})
	}
	if r.m.unregistered > 0 {
		g := groups[0]
		if err := g.IncreaseSize(r.m.unregistered); err != nil {
			return fmt.Errorf("IncreaseSize(%s, %d): %w", g.Id(), r.m.unregistered, err)
		}
		r.calls.add(-1, "NodeGroupIncreaseSize", 1)
	}
	return nil
}

func (r *replay) run() (*loopReport, error) {
	if err := r.setup(); err != nil {
		return nil, err
	}
	report := &loopReport{Nodes: len(r.grouped) + len(r.ungrouped), NonAutoscaled: len(r.ungrouped)}
	var background sync.WaitGroup
	nextRefresh := nodesCacheRefresh
	for i := 0; i < r.m.loops; i++ {
		now := time.Duration(i) * r.m.scanInterval
		start := time.Now()
		groups, err := r.loop(i)
		if err != nil {
			background.Wait()
			return nil, fmt.Errorf("loop %d: %w", i, err)
		}
		report.Groups = len(groups)
		report.Seconds = append(report.Seconds, time.Since(start).Seconds())
		if i+1 < r.m.loops && now+r.m.scanInterval >= nextRefresh { // the refresh falls before the next loop
			background.Wait() // wait.Until never overlaps two runs
			background.Add(1)
			go func(loop int) {
				defer background.Done()
				r.refreshInstances(loop, groups)
			}(i + 1)
			nextRefresh += nodesCacheRefresh
		}
	}
	background.Wait()
	r.calls.mu.Lock()
	defer r.calls.mu.Unlock()
	report.Calls = r.calls.loops[:r.m.loops]
	report.Setup = r.calls.setup
	report.FakeDeleted = r.fake
	return report, nil
}

// refreshInstances is the instance cache's background refresh: every group, one after the other.
// Counted in `loop`, the loop it runs beside.
func (r *replay) refreshInstances(loop int, groups []*caclient.NodeGroup) {
	for _, g := range groups {
		insts, err := g.Nodes()
		r.calls.add(loop, "NodeGroupNodes", 1)
		if err == nil {
			r.cache.set(g.Id(), insts)
		}
	}
}

func (r *replay) loop(i int) ([]*caclient.NodeGroup, error) {
	if err := r.ca.Refresh(); err != nil {
		return nil, fmt.Errorf("Refresh: %w", err)
	}
	r.calls.add(i, "Refresh", 1)
	groups := r.ca.NodeGroups()
	r.calls.add(i, "NodeGroups", 1)
	if i == 0 {
		r.ca.GPULabel()
		r.calls.add(i, "GPULabel", 1)
	}
	if err := r.fetchMissing(i, groups); err != nil {
		return nil, err
	}
	if err := r.deleteUnregistered(i, groups); err != nil {
		return nil, err
	}
	// the template provider: the first ready node of a group is its template; CSI-aware scheduling
	// also asks the group object NodeGroupForNode returned for its template
	usable := map[string]bool{}
	forNode := map[*apiv1.Node]*caclient.NodeGroup{}
	for _, node := range r.grouped {
		g, err := r.ca.NodeGroupForNode(node)
		if err != nil || g == nil {
			return nil, fmt.Errorf("NodeGroupForNode(%s): %v, %v", node.Spec.ProviderID, g, err)
		}
		r.calls.add(i, "NodeGroupForNode", 1)
		forNode[node] = g
		usable[g.Id()] = true
		r.hadNode[g.Id()] = true
		if r.m.csiAware {
			if err := r.template(i, g); err != nil {
				return nil, err
			}
		}
	}
	for _, g := range groups {
		if !usable[g.Id()] && !r.hadNode[g.Id()] {
			if err := r.template(i, g); err != nil {
				return nil, err
			}
		}
	}
	// nodes in no group: asked at every call site, the empty answer is never cached
	for _, node := range r.ungrouped {
		for k := 0; k < r.m.forNodeUngrouped; k++ {
			g, err := r.ca.NodeGroupForNode(node)
			if err != nil || g != nil {
				return nil, fmt.Errorf("NodeGroupForNode(%s): %v, %v (want no group)", node.Spec.ProviderID, g, err)
			}
			r.calls.add(i, "NodeGroupForNode", 1)
		}
	}
	for _, g := range groups {
		for t := 0; t < r.m.targetsPerGroup; t++ {
			if _, err := g.TargetSize(); err != nil {
				return nil, fmt.Errorf("TargetSize: %w", err)
			}
		}
		r.calls.add(i, "NodeGroupTargetSize", r.m.targetsPerGroup)
	}
	for _, node := range r.grouped {
		for o := 0; o < r.m.optionsPerNode; o++ {
			if _, err := forNode[node].GetOptions(r.defaults); err != nil && err != caclient.ErrNotImplemented {
				return nil, fmt.Errorf("GetOptions: %w", err)
			}
		}
		r.calls.add(i, "NodeGroupGetOptions", r.m.optionsPerNode)
	}
	if r.m.priceExpander {
		if err := r.price(i, groups); err != nil {
			return nil, err
		}
	}
	return groups, nil
}

// template asks a group object for its template (the client caches it on the object).
func (r *replay) template(i int, g *caclient.NodeGroup) error {
	if _, err := g.TemplateNodeInfo(); err != nil && err != caclient.ErrNotImplemented {
		return fmt.Errorf("TemplateNodeInfo(%s): %w", g.Id(), err)
	}
	r.calls.add(i, "NodeGroupTemplateNodeInfo", 1)
	return nil
}

// fetchMissing lists, in parallel, the groups the instance cache has no entry for.
func (r *replay) fetchMissing(i int, groups []*caclient.NodeGroup) error {
	var wg sync.WaitGroup
	errs := make([]error, len(groups))
	for k, g := range groups {
		if _, ok := r.cache.get(g.Id()); ok {
			continue
		}
		wg.Add(1)
		go func(k int, g *caclient.NodeGroup) {
			defer wg.Done()
			insts, err := g.Nodes()
			r.calls.add(i, "NodeGroupNodes", 1)
			if err != nil {
				errs[k] = fmt.Errorf("Nodes(%s): %w", g.Id(), err)
				return
			}
			r.cache.set(g.Id(), insts)
		}(k, g)
	}
	wg.Wait()
	return errors.Join(errs...)
}
