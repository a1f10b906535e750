package caclient

// The wire schema of cluster-autoscaler's externalgrpc.proto at one CA release, rebuilt at run time
// from protoc's descriptor dump of the upstream .proto at that release (schemas/<release>.json, kept
// byte-identical to the project's golden copies; tests/test_conformance.py checks that). Every
// request the client sends and every answer it reads goes through the schema of its generation, so
// a field the server numbers differently from that release is missed exactly where that release
// would miss it.

import (
	"embed"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"

	// Registered so the resolver below finds the well-known types the schema imports.
	_ "google.golang.org/protobuf/types/known/anypb"
	_ "google.golang.org/protobuf/types/known/durationpb"
	_ "google.golang.org/protobuf/types/known/timestamppb"
)

type goldenField struct {
	Label    string `json:"label"`
	Name     string `json:"name"`
	Number   int32  `json:"number"`
	Type     string `json:"type"`
	TypeName string `json:"type_name"`
}

type goldenMessage struct {
	Fields   []goldenField    `json:"fields"`
	MapEntry bool             `json:"map_entry"`
	Enum     map[string]int32 `json:"enum"`
}

type goldenMethod struct {
	Input  string `json:"input"`
	Output string `json:"output"`
}

type goldenSchema struct {
	Package  string                             `json:"package"`
	Syntax   string                             `json:"syntax"`
	Messages map[string]goldenMessage           `json:"messages"`
	Services map[string]map[string]goldenMethod `json:"services"`
}

// Schema is one CA release's externalgrpc wire schema.
type Schema struct {
	Release string
	Package string
	files   *protoregistry.Files
	service protoreflect.ServiceDescriptor
}

// k8sOpaqueMessages are the Kubernetes Go types that CA <= 1.34.x embeds in its messages. Their
// content is produced and consumed by Kubernetes' own Go code (v1.Node.Marshal, metav1.Time.Marshal,
// metav1.Duration.Unmarshal, ...), exactly as the gogo-generated types inside CA's protos package do,
// so the schema declares them as field-less proto2 messages: the embedded bytes travel as the
// message's unknown fields, untouched, and the wire type (length-delimited message) is still checked.
var k8sOpaqueMessages = map[string][]string{
	"k8s.io.api.core.v1":                   {"Node", "Pod"},
	"k8s.io.apimachinery.pkg.apis.meta.v1": {"Time", "Duration"},
}

var protoTypes = map[string]descriptorpb.FieldDescriptorProto_Type{
	"double": descriptorpb.FieldDescriptorProto_TYPE_DOUBLE, "float": descriptorpb.FieldDescriptorProto_TYPE_FLOAT,
	"int64": descriptorpb.FieldDescriptorProto_TYPE_INT64, "uint64": descriptorpb.FieldDescriptorProto_TYPE_UINT64,
	"int32": descriptorpb.FieldDescriptorProto_TYPE_INT32, "uint32": descriptorpb.FieldDescriptorProto_TYPE_UINT32,
	"bool": descriptorpb.FieldDescriptorProto_TYPE_BOOL, "string": descriptorpb.FieldDescriptorProto_TYPE_STRING,
	"bytes": descriptorpb.FieldDescriptorProto_TYPE_BYTES, "message": descriptorpb.FieldDescriptorProto_TYPE_MESSAGE,
	"enum": descriptorpb.FieldDescriptorProto_TYPE_ENUM,
}

var protoLabels = map[string]descriptorpb.FieldDescriptorProto_Label{
	"optional": descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL,
	"repeated": descriptorpb.FieldDescriptorProto_LABEL_REPEATED,
}

//go:embed schemas/*.json
var schemaFiles embed.FS

// LoadSchema builds the descriptors of schemas/<release>.json, with the `added` fields declared too.
func LoadSchema(release string, added ...AddedField) (*Schema, error) {
	raw, err := schemaFiles.ReadFile("schemas/" + release + ".json")
	if err != nil {
		return nil, err
	}
	var g goldenSchema
	if err := json.Unmarshal(raw, &g); err != nil {
		return nil, fmt.Errorf("%s.json: %w", release, err)
	}
	for _, f := range added {
		full := g.Package + "." + f.Message
		m, ok := g.Messages[full]
		if !ok {
			return nil, fmt.Errorf("%s.json: no message %s for the added field %s", release, full, f.Name)
		}
		for _, have := range m.Fields {
			if have.Number == f.Number || have.Name == f.Name {
				return nil, fmt.Errorf("%s.json: %s already declares %s = %d", release, full, have.Name, have.Number)
			}
		}
		m.Fields = append(m.Fields, goldenField{Label: "optional", Name: f.Name, Number: f.Number, Type: "message", TypeName: f.TypeName})
		g.Messages[full] = m
	}
	files := new(protoregistry.Files)
	var deps []string
	for pkg, names := range k8sOpaqueMessages {
		fd, err := opaqueFile(pkg, names)
		if err != nil {
			return nil, err
		}
		if err := files.RegisterFile(fd); err != nil {
			return nil, err
		}
		deps = append(deps, fd.Path())
	}
	for _, wkt := range []string{"google/protobuf/any.proto", "google/protobuf/duration.proto", "google/protobuf/timestamp.proto"} {
		fd, err := protoregistry.GlobalFiles.FindFileByPath(wkt)
		if err != nil {
			return nil, err
		}
		if err := files.RegisterFile(fd); err != nil {
			return nil, err
		}
		deps = append(deps, wkt)
	}
	sort.Strings(deps)
	fdp, err := g.fileDescriptorProto(release, deps)
	if err != nil {
		return nil, err
	}
	fd, err := protodesc.NewFile(fdp, files)
	if err != nil {
		return nil, fmt.Errorf("schema %s: %w", release, err)
	}
	if err := files.RegisterFile(fd); err != nil {
		return nil, err
	}
	svc := fd.Services().ByName("CloudProvider")
	if svc == nil {
		return nil, fmt.Errorf("schema %s has no CloudProvider service", release)
	}
	return &Schema{Release: release, Package: g.Package, files: files, service: svc}, nil
}

func opaqueFile(pkg string, names []string) (protoreflect.FileDescriptor, error) {
	fdp := &descriptorpb.FileDescriptorProto{
		Name:    proto.String(strings.ReplaceAll(pkg, ".", "/") + "/opaque.proto"),
		Package: proto.String(pkg),
		Syntax:  proto.String("proto2"),
	}
	for _, n := range names {
		fdp.MessageType = append(fdp.MessageType, &descriptorpb.DescriptorProto{Name: proto.String(n)})
	}
	return protodesc.NewFile(fdp, nil)
}

func (g *goldenSchema) fileDescriptorProto(release string, deps []string) (*descriptorpb.FileDescriptorProto, error) {
	fdp := &descriptorpb.FileDescriptorProto{
		Name:       proto.String("upstream/" + release + "/externalgrpc.proto"),
		Package:    proto.String(g.Package),
		Syntax:     proto.String(g.Syntax),
		Dependency: deps,
	}
	prefix := g.Package + "."
	names := make([]string, 0, len(g.Messages))
	for n := range g.Messages {
		names = append(names, n)
	}
	// Parents sort before their nested types ("A" < "A.B"), so a parent exists when its child is added.
	sort.Strings(names)
	msgs := map[string]*descriptorpb.DescriptorProto{}
	for _, full := range names {
		if !strings.HasPrefix(full, prefix) {
			return nil, fmt.Errorf("type %s is outside package %s", full, g.Package)
		}
		rel := strings.TrimPrefix(full, prefix)
		parent, local := "", rel
		if i := strings.LastIndex(rel, "."); i >= 0 {
			parent, local = rel[:i], rel[i+1:]
		}
		gm := g.Messages[full]
		if gm.Enum != nil {
			ed := &descriptorpb.EnumDescriptorProto{Name: proto.String(local)}
			vals := make([]string, 0, len(gm.Enum))
			for v := range gm.Enum {
				vals = append(vals, v)
			}
			sort.Slice(vals, func(i, j int) bool { return gm.Enum[vals[i]] < gm.Enum[vals[j]] })
			for _, v := range vals {
				ed.Value = append(ed.Value, &descriptorpb.EnumValueDescriptorProto{Name: proto.String(v), Number: proto.Int32(gm.Enum[v])})
			}
			if parent == "" {
				fdp.EnumType = append(fdp.EnumType, ed)
			} else if p := msgs[parent]; p != nil {
				p.EnumType = append(p.EnumType, ed)
			} else {
				return nil, fmt.Errorf("enum %s: parent %s unknown", full, parent)
			}
			continue
		}
		md := &descriptorpb.DescriptorProto{Name: proto.String(local)}
		if gm.MapEntry {
			md.Options = &descriptorpb.MessageOptions{MapEntry: proto.Bool(true)}
		}
		for _, f := range gm.Fields {
			t, ok := protoTypes[f.Type]
			if !ok {
				return nil, fmt.Errorf("%s.%s: unsupported type %q", full, f.Name, f.Type)
			}
			fp := &descriptorpb.FieldDescriptorProto{
				Name:     proto.String(f.Name),
				JsonName: proto.String(f.Name),
				Number:   proto.Int32(f.Number),
				Label:    protoLabels[f.Label].Enum(),
				Type:     t.Enum(),
			}
			if f.TypeName != "" {
				fp.TypeName = proto.String("." + f.TypeName)
			}
			md.Field = append(md.Field, fp)
		}
		msgs[rel] = md
		if parent == "" {
			fdp.MessageType = append(fdp.MessageType, md)
		} else if p := msgs[parent]; p != nil {
			p.NestedType = append(p.NestedType, md)
		} else {
			return nil, fmt.Errorf("message %s: parent %s unknown", full, parent)
		}
	}
	for svcName, methods := range g.Services {
		sd := &descriptorpb.ServiceDescriptorProto{Name: proto.String(svcName)}
		mnames := make([]string, 0, len(methods))
		for m := range methods {
			mnames = append(mnames, m)
		}
		sort.Strings(mnames)
		for _, m := range mnames {
			sd.Method = append(sd.Method, &descriptorpb.MethodDescriptorProto{
				Name:       proto.String(m),
				InputType:  proto.String("." + methods[m].Input),
				OutputType: proto.String("." + methods[m].Output),
			})
		}
		fdp.Service = append(fdp.Service, sd)
	}
	return fdp, nil
}

// Method returns the full gRPC method path and fresh request/response messages for an RPC.
func (s *Schema) Method(name string) (string, *dynamicpb.Message, *dynamicpb.Message, error) {
	m := s.service.Methods().ByName(protoreflect.Name(name))
	if m == nil {
		return "", nil, nil, fmt.Errorf("schema %s has no RPC %s", s.Release, name)
	}
	path := fmt.Sprintf("/%s/%s", s.service.FullName(), m.Name())
	return path, dynamicpb.NewMessage(m.Input()), dynamicpb.NewMessage(m.Output()), nil
}

// Has reports whether message msg (relative name) declares field name in this release.
func (s *Schema) Has(msg, field string) bool {
	d, err := s.files.FindDescriptorByName(protoreflect.FullName(s.Package + "." + msg))
	if err != nil {
		return false
	}
	md, ok := d.(protoreflect.MessageDescriptor)
	return ok && md.Fields().ByName(protoreflect.Name(field)) != nil
}
