package caclient

// Requests from a CA newer than the server's proto. A newer release adds fields (CA 1.37 adds two to
// NodeGroupAutoscalingOptions and one to the template answer, numbers not known here), and its
// requests carry them. The server must answer such a request exactly as the same request without
// them, except that NodeGroupGetOptions, when it answers options, returns the unknown fields of the
// `defaults` it was sent unchanged: a newer CA then reads its own defaults for the options the server
// does not know.
//
// futureFields are such fields: one of each wire type a proto3 message can carry (varint, 64-bit,
// length-delimited with a nested message and with plain bytes, 32-bit), at numbers no release uses.

import (
	"bytes"
	"fmt"
	"strings"
	"sync"

	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"
)

// futureNumbers are the field numbers of futureFields.
var futureNumbers = map[protowire.Number]bool{2001: true, 2002: true, 2003: true, 2004: true, 2005: true}

// futureFields is the encoding appended to every message of a request in future mode.
var futureFields = func() []byte {
	var b []byte
	b = protowire.AppendTag(b, 2001, protowire.VarintType)
	b = protowire.AppendVarint(b, 1<<40+7)
	b = protowire.AppendTag(b, 2002, protowire.Fixed64Type)
	b = protowire.AppendFixed64(b, 0x1122334455667788)
	var nested []byte // what a newer Duration-valued option would look like: {seconds: 90, nanos: 5}
	nested = protowire.AppendTag(nested, 1, protowire.VarintType)
	nested = protowire.AppendVarint(nested, 90)
	nested = protowire.AppendTag(nested, 2, protowire.VarintType)
	nested = protowire.AppendVarint(nested, 5)
	b = protowire.AppendTag(b, 2003, protowire.BytesType)
	b = protowire.AppendBytes(b, nested)
	b = protowire.AppendTag(b, 2004, protowire.Fixed32Type)
	b = protowire.AppendFixed32(b, 0xdeadbeef)
	b = protowire.AppendTag(b, 2005, protowire.BytesType)
	b = protowire.AppendString(b, "from a newer cluster-autoscaler")
	return b
}()

// SendFutureFields makes every later request carry futureFields in each of its externalgrpc
// messages (the request itself and every message inside it, Kubernetes' embedded objects and the
// well-known types excepted: their unknown fields would change what they encode).
func (p *CloudProvider) SendFutureFields(on bool) { p.future = on }

func addFutureFields(m protoreflect.Message) {
	md := m.Descriptor()
	pkg := string(md.ParentFile().Package())
	if md.IsMapEntry() || strings.HasPrefix(pkg, "k8s.io.") || strings.HasPrefix(pkg, "google.protobuf") {
		return
	}
	m.SetUnknown(append(append(protoreflect.RawFields(nil), m.GetUnknown()...), futureFields...))
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.Kind() != protoreflect.MessageKind && fd.Kind() != protoreflect.GroupKind:
		case fd.IsList():
			for i := 0; i < v.List().Len(); i++ {
				addFutureFields(v.List().Get(i).Message())
			}
		case !fd.IsMap():
			addFutureFields(v.Message())
		}
		return true
	})
}

// splitFuture separates the futureFields numbers from the other unknown fields of raw.
func splitFuture(raw []byte) (future, rest []byte) {
	for len(raw) > 0 {
		num, typ, n := protowire.ConsumeTag(raw)
		if n < 0 {
			return future, append(rest, raw...)
		}
		m := protowire.ConsumeFieldValue(num, typ, raw[n:])
		if m < 0 {
			return future, append(rest, raw...)
		}
		if futureNumbers[num] {
			future = append(future, raw[:n+m]...)
		} else {
			rest = append(rest, raw[:n+m]...)
		}
		raw = raw[n+m:]
	}
	return future, rest
}

// twinRecord is what twin mode found: every request sent twice, without and with futureFields.
type twinRecord struct {
	mu       sync.Mutex
	calls    map[string]int
	echoed   int
	problems []string
}

// StartTwin makes every later request go out twice, as it is and with futureFields added, and the
// answers compared (the first is the one the client uses). Only for calls that may be repeated
// without effect; not with SendFutureFields.
func (p *CloudProvider) StartTwin() { p.twin = &twinRecord{calls: map[string]int{}} }

// StopTwin ends twin mode: the calls compared per RPC, how many options answers echoed the
// defaults' futureFields, and every difference found.
func (p *CloudProvider) StopTwin() (calls map[string]int, echoed int, problems []string) {
	t := p.twin
	p.twin = nil
	if t == nil {
		return nil, 0, nil
	}
	return t.calls, t.echoed, t.problems
}

func (t *twinRecord) note(rpc string, problem string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.calls[rpc]++
	if problem != "" {
		t.problems = append(t.problems, rpc+": "+problem)
	}
}

func (t *twinRecord) compare(p *CloudProvider, rpc, path string, plainReq, plainResp *dynamicpb.Message, plainErr error) {
	if p.future {
		t.note(rpc, "twin mode needs plain requests (SendFutureFields is on)")
		return
	}
	req := proto.Clone(plainReq).(*dynamicpb.Message)
	addFutureFields(req)
	resp := dynamicpb.NewMessage(plainResp.Descriptor())
	err := p.send(path, req, resp)
	if errText(err) != errText(plainErr) {
		t.note(rpc, fmt.Sprintf("without unknown fields: %s; with them: %s", errText(plainErr), errText(err)))
		return
	}
	if err != nil {
		t.note(rpc, "")
		return
	}
	if rpc == "NodeGroupGetOptions" {
		if problem := t.takeEcho(resp); problem != "" {
			t.note(rpc, problem)
			return
		}
		if p.gen.LosesStartupTime && getMessage(plainResp, "nodeGroupAutoscalingOptions") == nil {
			// fields this release never sends make the request a newer CA's (see LosesStartupTime):
			// options may be answered to it, echoing them, where the plain request got none
			t.note(rpc, "")
			return
		}
	}
	same := func(a, b *dynamicpb.Message) bool {
		x, errA := proto.MarshalOptions{Deterministic: true}.Marshal(a)
		y, errB := proto.MarshalOptions{Deterministic: true}.Marshal(b)
		return errA == nil && errB == nil && bytes.Equal(x, y)
	}
	if !same(plainResp, resp) {
		// The backend's state may have moved between the two calls: one more plain call decides.
		again := dynamicpb.NewMessage(plainResp.Descriptor())
		if err := p.send(path, plainReq, again); err != nil || !same(again, resp) {
			t.note(rpc, fmt.Sprintf("answers differ:\n        without unknown fields: %v\n        with them:              %v", plainResp, resp))
			return
		}
	}
	t.note(rpc, "")
}

// takeEcho checks that an options answer carries the defaults' futureFields unchanged, and removes
// them so the rest can be compared with the plain answer.
func (t *twinRecord) takeEcho(resp *dynamicpb.Message) string {
	opts := getMessage(resp, "nodeGroupAutoscalingOptions")
	if opts == nil {
		return ""
	}
	echo, rest := splitFuture(opts.GetUnknown())
	if !bytes.Equal(echo, futureFields) {
		return fmt.Sprintf("options answered without echoing the defaults' unknown fields byte for byte: sent %x, got back %x", futureFields, echo)
	}
	opts.SetUnknown(rest)
	t.mu.Lock()
	t.echoed++
	t.mu.Unlock()
	return ""
}

func errText(err error) string {
	if err == nil {
		return "OK"
	}
	st, _ := status.FromError(err)
	return st.Code().String() + " " + st.Message()
}
