package caclient

// The cloud-provider half of the client: node groups, node-to-group lookups, GPU facts, pricing,
// Refresh and Cleanup, with CA's caches.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"
	apiv1 "k8s.io/api/core/v1"
)

// ErrNotImplemented is what an optional RPC answering UNIMPLEMENTED becomes from CA 1.29 on (CA's
// cloudprovider.ErrNotImplemented): the caller falls back to its own behaviour.
var ErrNotImplemented = errors.New("Not implemented")

// CloudProvider is one CA process's view of the server.
type CloudProvider struct {
	gen     Generation
	schema  *Schema
	conn    *grpc.ClientConn
	timeout time.Duration

	mu           sync.Mutex
	groupsCache  []*NodeGroup // nil: not cached
	forNodeCache map[string]*NodeGroup
	gpuLabel     *string
	gpuTypes     map[string]struct{}

	future bool        // every request carries futureFields (SendFutureFields)
	twin   *twinRecord // every request is also sent with futureFields and the answers compared
}

// Build reads the cloud-config as the generation does and connects, as CA does at start (CA exits on
// any error here).
func Build(cloudConfigPath string, gen Generation) (*CloudProvider, error) {
	cfg, err := readCloudConfig(cloudConfigPath, gen.ConfigDialect)
	if err != nil {
		return nil, err
	}
	conn, err := cfg.Dial(nil)
	if err != nil {
		return nil, err
	}
	return New(conn, cfg.timeoutFor(gen), gen)
}

// New wraps an open connection.
func New(conn *grpc.ClientConn, timeout time.Duration, gen Generation) (*CloudProvider, error) {
	schema, err := LoadSchema(gen.Schema, gen.Added...)
	if err != nil {
		return nil, err
	}
	return &CloudProvider{gen: gen, schema: schema, conn: conn, timeout: timeout, forNodeCache: map[string]*NodeGroup{}}, nil
}

// Generation is the wire generation this client speaks.
func (p *CloudProvider) Generation() Generation { return p.gen }

// Timeout is the per-call deadline.
func (p *CloudProvider) Timeout() time.Duration { return p.timeout }

// Close drops the connection.
func (p *CloudProvider) Close() error { return p.conn.Close() }

// invoke makes one RPC under the deadline: fill sets the request's fields (an error there means the
// client could not encode the request, and nothing is sent); the answer is returned as a message of
// the generation's schema.
func (p *CloudProvider) invoke(rpc string, fill func(req protoreflect.Message) error) (*dynamicpb.Message, error) {
	path, req, resp, err := p.schema.Method(rpc)
	if err != nil {
		return nil, err
	}
	if fill != nil {
		if err := fill(req); err != nil {
			return nil, err
		}
	}
	if p.future {
		addFutureFields(req)
	}
	err = p.send(path, req, resp)
	if p.twin != nil {
		p.twin.compare(p, rpc, path, req, resp, err)
	}
	if err != nil {
		return nil, err
	}
	return resp, nil
}

// send makes one call under the client's deadline.
func (p *CloudProvider) send(path string, req, resp *dynamicpb.Message) error {
	ctx, cancel := context.WithTimeout(context.Background(), p.timeout)
	defer cancel()
	return p.conn.Invoke(ctx, path, req, resp)
}

// optional is what the client makes of an optional RPC's error: from 1.29 on, UNIMPLEMENTED becomes
// ErrNotImplemented; before, every error reaches CA as the gRPC status it is.
func (p *CloudProvider) optional(err error) error {
	if !p.gen.MapsUnimplemented {
		return err
	}
	if st, ok := status.FromError(err); ok && err != nil && st.Code() == codes.Unimplemented {
		return ErrNotImplemented
	}
	return err
}

// Declined reports whether err is an optional RPC's "not implemented", in the form the generation
// passes it up: ErrNotImplemented from 1.29, the raw UNIMPLEMENTED status before.
func (p *CloudProvider) Declined(err error) bool {
	if errors.Is(err, ErrNotImplemented) {
		return true
	}
	st, ok := status.FromError(err)
	return ok && err != nil && st.Code() == codes.Unimplemented
}

func (p *CloudProvider) group(m protoreflect.Message) *NodeGroup {
	return &NodeGroup{
		provider: p,
		id:       getString(m, "id"),
		minSize:  int(getInt(m, "minSize")),
		maxSize:  int(getInt(m, "maxSize")),
		debug:    getString(m, "debug"),
	}
}

// NodeGroups lists the groups, cached until Refresh. A failed call yields an empty list, uncached.
func (p *CloudProvider) NodeGroups() []*NodeGroup {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.groupsCache != nil {
		return p.groupsCache
	}
	groups := []*NodeGroup{}
	resp, err := p.invoke("NodeGroups", nil)
	if err != nil {
		return groups
	}
	list := resp.Get(field(resp, "nodeGroups")).List()
	for i := 0; i < list.Len(); i++ {
		groups = append(groups, p.group(list.Get(i).Message()))
	}
	p.groupsCache = groups
	return groups
}

// NodeGroupForNode is the group of a node, nil when the server names none. Cached until Refresh per
// node name + providerID; an empty answer is not cached, so a node outside every group costs a call
// each time.
func (p *CloudProvider) NodeGroupForNode(node *apiv1.Node) (*NodeGroup, error) {
	if node == nil {
		return nil, errors.New("node in NodeGroupForNode call cannot be nil")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	key := node.Name + node.Spec.ProviderID
	if g, ok := p.forNodeCache[key]; ok {
		return g, nil
	}
	resp, err := p.invoke("NodeGroupForNode", func(req protoreflect.Message) error {
		setMessage(req, "node", func(m protoreflect.Message) { fillNode(m, node) })
		return nil
	})
	if err != nil {
		return nil, err
	}
	pbGroup := getMessage(resp, "nodeGroup")
	if pbGroup == nil || getString(pbGroup, "id") == "" {
		return nil, nil
	}
	g := p.group(pbGroup)
	p.forNodeCache[key] = g
	return g, nil
}

// GPULabel is cached for the process after its first success; a failure yields "" and is retried.
func (p *CloudProvider) GPULabel() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.gpuLabel != nil {
		return *p.gpuLabel
	}
	resp, err := p.invoke("GPULabel", nil)
	if err != nil {
		return ""
	}
	label := getString(resp, "label")
	p.gpuLabel = &label
	return label
}

// GetAvailableGPUTypes is cached like GPULabel; a failure yields nil.
func (p *CloudProvider) GetAvailableGPUTypes() map[string]struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.gpuTypes != nil {
		return p.gpuTypes
	}
	resp, err := p.invoke("GetAvailableGPUTypes", nil)
	if err != nil {
		return nil
	}
	types := map[string]struct{}{}
	resp.Get(field(resp, "gpuTypes")).Map().Range(func(k protoreflect.MapKey, _ protoreflect.Value) bool {
		types[k.String()] = struct{}{}
		return true
	})
	p.gpuTypes = types
	return types
}

// Refresh drops the NodeGroups and NodeGroupForNode caches, then calls Refresh.
func (p *CloudProvider) Refresh() error {
	p.mu.Lock()
	p.groupsCache = nil
	p.forNodeCache = map[string]*NodeGroup{}
	p.mu.Unlock()
	_, err := p.invoke("Refresh", nil)
	return err
}

// Cleanup calls Cleanup.
func (p *CloudProvider) Cleanup() error {
	_, err := p.invoke("Cleanup", nil)
	return err
}

// NodePrice is the price of a node over [start, end). UNIMPLEMENTED -> ErrNotImplemented.
func (p *CloudProvider) NodePrice(node *apiv1.Node, start, end time.Time) (float64, error) {
	return p.price("PricingNodePrice", start, end, func(req protoreflect.Message) error {
		setMessage(req, "node", func(m protoreflect.Message) { fillNode(m, node) })
		return nil
	})
}

// PodPrice is the price of a pod over [start, end): the pod travels as Kubernetes' own encoding of
// it, in the embedded field (legacy) and/or pod_bytes (current), as the generation declares.
func (p *CloudProvider) PodPrice(pod *apiv1.Pod, start, end time.Time) (float64, error) {
	return p.price("PricingPodPrice", start, end, func(req protoreflect.Message) error {
		raw, err := pod.Marshal()
		if err != nil {
			return fmt.Errorf("marshal pod: %w", err)
		}
		if hasField(req, "pod") {
			setOpaque(req, "pod", raw)
		}
		if hasField(req, "pod_bytes") {
			req.Set(field(req, "pod_bytes"), protoreflect.ValueOfBytes(raw))
		}
		return nil
	})
}

// price makes one pricing call: fill sets what is priced, the window is set in every form the
// generation declares.
func (p *CloudProvider) price(rpc string, start, end time.Time, fill func(req protoreflect.Message) error) (float64, error) {
	resp, err := p.invoke(rpc, func(req protoreflect.Message) error {
		if err := fill(req); err != nil {
			return err
		}
		return setWindow(req, start, end)
	})
	if err != nil {
		return 0, p.optional(err)
	}
	return getFloat(resp, "price"), nil
}

// setWindow fills the time window in every form the request declares: meta Time startTime/endTime
// (seconds only, as Kubernetes marshals it) and google.protobuf.Timestamp startTimestamp/endTimestamp.
func setWindow(req protoreflect.Message, from, to time.Time) error {
	if hasField(req, "startTime") {
		for name, t := range map[string]time.Time{"startTime": from, "endTime": to} {
			raw, err := metaTime(t)
			if err != nil {
				return err
			}
			setOpaque(req, name, raw)
		}
	}
	if hasField(req, "startTimestamp") {
		setTimestamp(req, "startTimestamp", from)
		setTimestamp(req, "endTimestamp", to)
	}
	return nil
}

// TemplateFields asks for a group's template and returns both template fields as the server sent
// them, and whether the generation declares both (only 1.34.2 does; it reads nodeBytes first and
// falls back to nodeInfo, so a server must send the same Node in each).
func (p *CloudProvider) TemplateFields(id string) (legacy, current []byte, both bool, err error) {
	resp, err := p.invoke("NodeGroupTemplateNodeInfo", func(req protoreflect.Message) error {
		setScalar(req, "id", id)
		return nil
	})
	if err != nil {
		return nil, nil, false, p.optional(err)
	}
	if !hasField(resp, "nodeInfo") || !hasField(resp, "nodeBytes") {
		return nil, nil, false, nil
	}
	return getOpaque(resp, "nodeInfo"), getBytes(resp, "nodeBytes"), true, nil
}

// Declares reports whether the generation's schema has field `name` in message `message`.
func (p *CloudProvider) Declares(message, name string) bool { return p.schema.Has(message, name) }
