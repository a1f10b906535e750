// Command standin takes cluster-autoscaler's place in its own pod, for the realnode tier: the
// official cluster-autoscaler chart runs it as `./cluster-autoscaler` with CA's flags, and it does
// toward the provider what CA's main loop does, through the project's CA-faithful client (package
// caclient, newest wire generation), while answering the chart's liveness probe where CA does.
//
// What it takes from CA (k8s.io/autoscaler, cluster-autoscaler/ at tag cluster-autoscaler-1.36.1):
//   - flags as CA's command line gets them (`--name=value` or `--name value`); it reads
//     --cloud-provider (must be externalgrpc), --cloud-config (the externalgrpc file: address,
//     grpc_timeout, cert/key/cacert), --scan-interval (default 10s) and --address (default :8085,
//     where CA serves /health-check and /metrics); every other flag is accepted and listed once;
//   - the provider is built once at start (CA exits when the cloud-config cannot be read);
//   - each loop: Refresh, NodeGroups, then per group TargetSize, GetOptions (with CA's defaults) and
//     Nodes, and NodeGroupForNode for each instance listed (a registered node names its instance as
//     providerID); GPULabel and GetAvailableGPUTypes are asked once per process (the client caches
//     them after their first success);
//   - /health-check answers 200 until the first loop has run and while the last loop succeeded, and
//     500 with the error once a loop failed (CA's health check fails when its loop stops making
//     progress; here a failed call is that failure), so the kubelet restarts it as it would CA.
//
// Each loop prints one line: its number, how long it took, and the calls made per RPC. The calls
// made so far (per RPC, and failed ones) are also served as JSON at /calls.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"cloudprovider-grpc/tests/conformance/caclient"
	apiv1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// caDefaults are CA's default per-group options, sent with every GetOptions as CA sends its own.
var caDefaults = caclient.Options{
	ScaleDownUtilizationThreshold: 0.5, ScaleDownGpuUtilizationThreshold: 0.5,
	ScaleDownUnneededTime: 10 * time.Minute, ScaleDownUnreadyTime: 20 * time.Minute, MaxNodeProvisionTime: 15 * time.Minute,
}

// flags are the command line as `name -> value` (a bare flag is "true").
func parseFlags(args []string) map[string]string {
	out := map[string]string{}
	for i := 0; i < len(args); i++ {
		arg := args[i]
		if !strings.HasPrefix(arg, "-") {
			continue
		}
		name := strings.TrimLeft(arg, "-")
		if key, value, ok := strings.Cut(name, "="); ok {
			out[key] = value
			continue
		}
		if i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") {
			out[name] = args[i+1]
			i++
			continue
		}
		out[name] = "true"
	}
	return out
}

// state is what the health check and /calls report.
type state struct {
	mu     sync.Mutex
	loops  int
	lastOK bool
	last   error
	calls  map[string]int
	failed map[string]int
}

func (s *state) count(rpc string, err error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls[rpc]++
	if err != nil {
		s.failed[rpc]++
		return fmt.Errorf("%s: %w", rpc, err)
	}
	return nil
}

// finish records a loop's outcome and returns its number.
func (s *state) finish(err error) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.loops++
	s.lastOK, s.last = err == nil, err
	return s.loops
}

func (s *state) healthCheck(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.loops > 0 && !s.lastOK {
		http.Error(w, fmt.Sprintf("loop %d failed: %v", s.loops, s.last), http.StatusInternalServerError)
		return
	}
	fmt.Fprintf(w, "OK: %d loops\n", s.loops)
}

func (s *state) report(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"loops": s.loops, "last_ok": s.lastOK, "calls": s.calls, "failed": s.failed})
}

// loop is one pass of CA's calls; the first error ends it.
func loop(ca *caclient.CloudProvider, s *state) error {
	if err := s.count("Refresh", ca.Refresh()); err != nil {
		return err
	}
	groups := ca.NodeGroups()
	if len(groups) == 0 { // the client turns a failed call into an empty list, as CA's does
		return s.count("NodeGroups", errors.New("no node groups (the call failed or the cloud lists none)"))
	}
	_ = s.count("NodeGroups", nil)
	// Asked every loop, called once: the client caches both after their first success, as CA does.
	_ = ca.GPULabel()
	_ = ca.GetAvailableGPUTypes()
	for _, g := range groups {
		if _, err := g.TargetSize(); err != nil {
			return s.count("NodeGroupTargetSize", err)
		}
		_ = s.count("NodeGroupTargetSize", nil)
		if _, err := g.GetOptions(caDefaults); err != nil && !ca.Declined(err) {
			return s.count("NodeGroupGetOptions", err)
		}
		_ = s.count("NodeGroupGetOptions", nil)
		instances, err := g.Nodes()
		if err := s.count("NodeGroupNodes", err); err != nil {
			return err
		}
		for _, instance := range instances {
			node := &apiv1.Node{ObjectMeta: metav1.ObjectMeta{Name: instance.Id}, Spec: apiv1.NodeSpec{ProviderID: instance.Id}}
			_, err := ca.NodeGroupForNode(node)
			if err := s.count("NodeGroupForNode", err); err != nil {
				return err
			}
		}
	}
	return nil
}

func (s *state) summary(since map[string]int) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var parts []string
	for rpc, n := range s.calls {
		if d := n - since[rpc]; d > 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", rpc, d))
		}
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}

func (s *state) snapshot() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int, len(s.calls))
	for k, v := range s.calls {
		out[k] = v
	}
	return out
}

func main() {
	flags := parseFlags(os.Args[1:])
	if provider := flags["cloud-provider"]; provider != "externalgrpc" {
		fmt.Fprintf(os.Stderr, "standin: --cloud-provider=%q: only externalgrpc is stood in for\n", provider)
		os.Exit(1)
	}
	interval := 10 * time.Second
	if v, ok := flags["scan-interval"]; ok {
		d, err := time.ParseDuration(v)
		if err != nil {
			fmt.Fprintf(os.Stderr, "standin: --scan-interval: %v\n", err)
			os.Exit(1)
		}
		interval = d
	}
	address := ":8085"
	if v, ok := flags["address"]; ok {
		address = v
	}
	var names []string
	for name, value := range flags {
		names = append(names, name+"="+value)
	}
	sort.Strings(names)
	fmt.Printf("standin: flags %s\n", strings.Join(names, " "))
	ca, err := caclient.Build(flags["cloud-config"], caclient.Newest())
	if err != nil {
		fmt.Fprintf(os.Stderr, "standin: cloud provider not built: %v\n", err)
		os.Exit(1)
	}
	defer ca.Close()
	s := &state{calls: map[string]int{}, failed: map[string]int{}}
	mux := http.NewServeMux()
	mux.HandleFunc("/health-check", s.healthCheck)
	mux.HandleFunc("/calls", s.report)
	go func() {
		if err := http.ListenAndServe(address, mux); err != nil {
			fmt.Fprintf(os.Stderr, "standin: health-check server: %v\n", err)
			os.Exit(1)
		}
	}()
	for tick := time.NewTicker(interval); ; <-tick.C {
		before, started := s.snapshot(), time.Now()
		err := loop(ca, s)
		n, took := s.finish(err), time.Since(started).Round(time.Millisecond)
		if err != nil {
			fmt.Printf("loop %d failed after %v: %v (calls: %s)\n", n, took, err, s.summary(before))
			continue
		}
		fmt.Printf("loop %d ok in %v: %s\n", n, took, s.summary(before))
	}
}
