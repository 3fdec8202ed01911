"""Weights at export: content ids, inline or named data (.ptd)."""
