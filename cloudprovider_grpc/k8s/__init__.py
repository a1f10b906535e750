"""Kubernetes wire helpers: Quantity rules, template Node encoding, Pod resource requests."""
