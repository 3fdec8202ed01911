"""Helpers for language models: greedy decoding over an exported program."""
