"""What the memory tests' child processes read of themselves (Linux /proc):
a field of /proc/self/status in bytes, and a reset of its peak (VmHWM)."""
from __future__ import annotations


def status(key: str) -> int:
    """VmRSS, VmHWM, RssAnon, ... of this process, in bytes."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(key)


def reset_peak() -> None:
    """VmHWM := VmRSS, so a later VmHWM is the peak from now on."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
