package caclient

// Small accessors for dynamic (schema-driven) protobuf messages, by field name as upstream spells it.

import (
	"fmt"
	"time"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

func field(m protoreflect.Message, name string) protoreflect.FieldDescriptor {
	fd := m.Descriptor().Fields().ByName(protoreflect.Name(name))
	if fd == nil {
		// A programming error in the harness, not a server fault: the caller asked for a field the
		// release does not declare. Callers check Schema.Has first for release-dependent fields.
		panic(fmt.Sprintf("%s has no field %q", m.Descriptor().FullName(), name))
	}
	return fd
}

func hasField(m protoreflect.Message, name string) bool {
	return m.Descriptor().Fields().ByName(protoreflect.Name(name)) != nil
}

func setScalar(m protoreflect.Message, name string, v any) {
	m.Set(field(m, name), protoreflect.ValueOf(v))
}

func getString(m protoreflect.Message, name string) string { return m.Get(field(m, name)).String() }
func getInt(m protoreflect.Message, name string) int64     { return m.Get(field(m, name)).Int() }
func getFloat(m protoreflect.Message, name string) float64 { return m.Get(field(m, name)).Float() }
func getBool(m protoreflect.Message, name string) bool     { return m.Get(field(m, name)).Bool() }

// getBytes returns the bytes field, nil when it was absent on the wire (as generated Go code does).
func getBytes(m protoreflect.Message, name string) []byte {
	fd := field(m, name)
	if !m.Has(fd) {
		return nil
	}
	return m.Get(fd).Bytes()
}

// getMessage returns the sub-message, or nil when it was absent on the wire.
func getMessage(m protoreflect.Message, name string) protoreflect.Message {
	fd := field(m, name)
	if !m.Has(fd) {
		return nil
	}
	return m.Get(fd).Message()
}

func setStringMap(m protoreflect.Message, name string, kv map[string]string) {
	mp := m.Mutable(field(m, name)).Map()
	for k, v := range kv {
		mp.Set(protoreflect.ValueOfString(k).MapKey(), protoreflect.ValueOfString(v))
	}
}

// setOpaque fills an embedded Kubernetes message (declared opaque, see schema.go) with the bytes
// Kubernetes' own Marshal produced.
func setOpaque(m protoreflect.Message, name string, raw []byte) {
	sub := m.Mutable(field(m, name)).Message()
	sub.SetUnknown(protoreflect.RawFields(raw))
}

// getOpaque returns the raw bytes of an embedded Kubernetes message, nil when absent.
func getOpaque(m protoreflect.Message, name string) []byte {
	sub := getMessage(m, name)
	if sub == nil {
		return nil
	}
	raw := sub.GetUnknown()
	if raw == nil {
		return []byte{}
	}
	return raw
}

func setWKT(m protoreflect.Message, name string, v protoreflect.ProtoMessage) {
	fd := field(m, name)
	sub := m.NewField(fd).Message()
	// Copy through the wire: the schema's field type is the registered WKT descriptor.
	b := v.ProtoReflect()
	b.Range(func(f protoreflect.FieldDescriptor, val protoreflect.Value) bool {
		sub.Set(sub.Descriptor().Fields().ByNumber(f.Number()), val)
		return true
	})
	m.Set(fd, protoreflect.ValueOfMessage(sub))
}

func setTimestamp(m protoreflect.Message, name string, t time.Time) {
	setWKT(m, name, timestamppb.New(t))
}

func setDuration(m protoreflect.Message, name string, d time.Duration) {
	setWKT(m, name, durationpb.New(d))
}

// getDuration reads a google.protobuf.Duration field; ok is false when absent.
func getDuration(m protoreflect.Message, name string) (time.Duration, bool) {
	sub := getMessage(m, name)
	if sub == nil {
		return 0, false
	}
	secs := sub.Get(sub.Descriptor().Fields().ByName("seconds")).Int()
	nanos := sub.Get(sub.Descriptor().Fields().ByName("nanos")).Int()
	return time.Duration(secs)*time.Second + time.Duration(nanos), true
}
