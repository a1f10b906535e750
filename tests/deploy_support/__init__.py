"""Helpers for the deployment tests (tests/deploy/): the layouts rendered by the real tools, and manifest
inspection."""
