package caclient

// Kubernetes objects on the wire, encoded and decoded by Kubernetes' own Go code (k8s.io/api,
// k8s.io/apimachinery): the bytes CA sends and reads are exactly these types' Marshal output.

import (
	"time"

	"google.golang.org/protobuf/reflect/protoreflect"
	apiv1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// fillNode writes the ExternalGrpcNode CA derives from a Node: providerID, name, labels, annotations.
func fillNode(m protoreflect.Message, node *apiv1.Node) {
	setScalar(m, "providerID", node.Spec.ProviderID)
	setScalar(m, "name", node.Name)
	setStringMap(m, "labels", node.Labels)
	setStringMap(m, "annotations", node.Annotations)
}

// setMessage creates sub-message `name` (present on the wire even when fill sets nothing).
func setMessage(m protoreflect.Message, name string, fill func(protoreflect.Message)) {
	fd := field(m, name)
	sub := m.NewField(fd).Message()
	fill(sub)
	m.Set(fd, protoreflect.ValueOfMessage(sub))
}

// metaTime is a meta/v1 Time as Kubernetes marshals it (whole seconds).
func metaTime(t time.Time) ([]byte, error) {
	mt := metav1.NewTime(t)
	return mt.Marshal()
}

// metaDurationBytes is a meta/v1 Duration (nanoseconds) as Kubernetes marshals it.
func metaDurationBytes(d time.Duration) ([]byte, error) {
	md := metav1.Duration{Duration: d}
	return md.Marshal()
}

// metaDuration decodes a meta/v1 Duration.
func metaDuration(raw []byte) (time.Duration, error) {
	var md metav1.Duration
	if err := md.Unmarshal(raw); err != nil {
		return 0, err
	}
	return md.Duration, nil
}
