"""Delegate-owned state (KV caches) at export: tagging, lifting, KV-update rewriting."""
