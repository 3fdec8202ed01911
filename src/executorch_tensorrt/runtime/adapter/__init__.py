"""The adapter boundary: the C ABI mirror (abi) and the loader of the native library."""
