"""Per-node times of the onnxruntime fallback, for ETDump (docs/profiling.md).

onnxruntime's C API profiles a whole session: EnableProfiling at creation, and
EndProfiling writes every event since then to a JSON file and stops. So each
timed call ends the session's timing log (onnxruntime's "profiling"), reads the
nodes of its last run, and replaces the session with a fresh timed one (that
costs a session creation per call, after the call's stages were timed; per-node
timings are opt-in).
The files go to a temporary directory this object creates and removes.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile

from .capi import OrtSession
from .threads import OrtThreads

_KERNEL_SUFFIX = "_kernel_time"


class OrtNodeTimings:
    """Creates profiling sessions of one model and reads their node events."""

    def __init__(self, model: bytes, weights=None):
        self.model = model
        self.weights = weights  # OrtSession's (named-data weights)
        self.directory = tempfile.mkdtemp(prefix="executorch_tensorrt_ort_profile_")

    def new_session(self) -> OrtSession:
        return OrtSession(self.model, threads=OrtThreads.from_environment(),
                          timings_prefix=os.path.join(self.directory, "call"),
                          weights=self.weights)

    def last_run_nodes(self, session: OrtSession, run_start_ns: int) -> list[tuple[str, int, int]]:
        """(node name, start, end) of the session's last run, in the caller's
        clock: onnxruntime's timestamps (microseconds since its timing log began)
        are placed relative to the run, which started at run_start_ns."""
        path = os.path.realpath(session.end_profiling())
        if os.path.dirname(path) != os.path.realpath(self.directory):
            raise RuntimeError(f"onnxruntime wrote its timing log to {path}, outside "
                               f"{self.directory} where the executor asked for it")
        try:
            with open(path, encoding="utf-8") as f:
                events = json.load(f)
        finally:
            os.unlink(path)
        runs = [e for e in events if e.get("cat") == "Session" and e.get("name") == "model_run"]
        if not runs:
            return []
        run_ts = runs[-1]["ts"]
        nodes = []
        for e in events:
            name = e.get("name", "")
            if e.get("cat") != "Node" or not name.endswith(_KERNEL_SUFFIX) or e["ts"] < run_ts:
                continue
            start = run_start_ns + int((e["ts"] - run_ts) * 1000)
            nodes.append((name[: -len(_KERNEL_SUFFIX)], start, start + int(e["dur"] * 1000)))
        return nodes

    def close(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)
