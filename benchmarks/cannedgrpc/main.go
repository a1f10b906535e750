// Command cannedgrpc is the floor of any gRPC server on this machine: a grpc-go server that answers
// every call of the externalgrpc CloudProvider service with reply bytes prepared beforehand, so the
// only work per call is grpc-go's own (HTTP/2 framing, one goroutine per stream) plus a map lookup.
//
// It knows no schema. Requests are received as raw bytes (a pass-through codec) and a reply is picked
// by method and, optionally, by one string field of the request found by its field-number path (the
// group id, field 1, of the per-group requests; the node's providerID, field 1 of field 1, of
// NodeGroupForNode). benchmarks/rpc_latency.py and benchmarks/ca_loop.py write the reply table from
// our own server's answers, so both servers send identical bytes.
//
//	cannedgrpc -address 127.0.0.1:PORT -replies table.json
//
// table.json: {"/pkg.Service/Method": {"key": [1], "default": REPLY, "by_key": {"k": REPLY}}}, where
// REPLY is {"b64": "<response bytes>"} or {"code": 12, "message": "..."} (a gRPC status).
package main

import (
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net"
	"os"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
)

type reply struct {
	B64     string `json:"b64"`
	Code    int    `json:"code"`
	Message string `json:"message"`

	body []byte
}

type method struct {
	Key     []protowire.Number `json:"key"`
	Default *reply             `json:"default"`
	ByKey   map[string]*reply  `json:"by_key"`
}

// rawCodec hands the request bytes to the handler untouched and sends reply bytes as they are.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *(v.(*[]byte)), nil }
func (rawCodec) Unmarshal(data []byte, v any) error {
	*(v.(*[]byte)) = append([]byte(nil), data...)
	return nil
}
func (rawCodec) Name() string { return "proto" }

// field returns the first length-delimited field `num` of a serialized message, or nil.
func field(msg []byte, num protowire.Number) []byte {
	for len(msg) > 0 {
		n, typ, size := protowire.ConsumeTag(msg)
		if size < 0 {
			return nil
		}
		msg = msg[size:]
		if typ == protowire.BytesType {
			value, vsize := protowire.ConsumeBytes(msg)
			if vsize < 0 {
				return nil
			}
			if n == num {
				return value
			}
			msg = msg[vsize:]
			continue
		}
		vsize := protowire.ConsumeFieldValue(n, typ, msg)
		if vsize < 0 {
			return nil
		}
		msg = msg[vsize:]
	}
	return nil
}

func (m *method) pick(req []byte) *reply {
	if len(m.Key) > 0 {
		value := req
		for _, num := range m.Key {
			value = field(value, num)
		}
		if r, ok := m.ByKey[string(value)]; ok {
			return r
		}
	}
	return m.Default
}

func load(path string) (map[string]*method, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	table := map[string]*method{}
	if err := json.Unmarshal(raw, &table); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	decode := func(r *reply) error {
		if r == nil {
			return nil
		}
		body, err := base64.StdEncoding.DecodeString(r.B64)
		r.body = body
		return err
	}
	for name, m := range table {
		if err := decode(m.Default); err != nil {
			return nil, fmt.Errorf("%s default: %w", name, err)
		}
		for k, r := range m.ByKey {
			if err := decode(r); err != nil {
				return nil, fmt.Errorf("%s %q: %w", name, k, err)
			}
		}
	}
	return table, nil
}

func main() {
	address := flag.String("address", "127.0.0.1:0", "listen address (loopback)")
	replies := flag.String("replies", "", "reply table (JSON)")
	flag.Parse()
	table, err := load(*replies)
	if err != nil {
		log.Fatal(err)
	}
	lis, err := net.Listen("tcp", *address)
	if err != nil {
		log.Fatal(err)
	}
	handler := func(_ any, stream grpc.ServerStream) error {
		name, _ := grpc.MethodFromServerStream(stream)
		var req []byte
		if err := stream.RecvMsg(&req); err != nil {
			return err
		}
		m, ok := table[name]
		if !ok {
			return status.Errorf(codes.Unimplemented, "%s: no canned reply", name)
		}
		r := m.pick(req)
		if r == nil {
			return status.Errorf(codes.NotFound, "%s: no canned reply for this request", name)
		}
		if r.Code != 0 {
			return status.Error(codes.Code(r.Code), r.Message)
		}
		return stream.SendMsg(&r.body)
	}
	server := grpc.NewServer(grpc.ForceServerCodec(rawCodec{}), grpc.UnknownServiceHandler(handler))
	fmt.Printf("listening on %s\n", lis.Addr())
	if err := server.Serve(lis); err != nil {
		log.Fatal(err)
	}
}
