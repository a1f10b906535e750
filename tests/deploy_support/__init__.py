"""Helpers for tests/test_deploy.py: a minimal kustomize renderer and manifest inspection."""
