"""Library helpers of the CLI and the reference runners: built-in example
models, program description, reference outputs."""
