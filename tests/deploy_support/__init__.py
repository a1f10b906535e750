"""Helpers for the deployment tests (tests/deploy/): a minimal kustomize renderer and manifest inspection."""
