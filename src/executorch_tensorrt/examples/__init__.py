"""Built-in example models (the CLI's --example, the demo, the LLM configs)."""
