"""Test helpers for the Kubernetes wire tests (golden data paths, an independent wire reader)."""
