"""The adapter's BackendInterface, driven end to end.

libadapter_driver.so calls the registered TensorRTBackend's init/execute/
destroy as an ExecuTorch Method does; e2e_child.py installs a tiny Python
executor table and checks what reaches it and what comes back (outputs,
resize, error codes, the stderr line, last_error). All scenarios run in one
child process (loading executorch.runtime costs seconds); each is reported
as its own test.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import adapter_build

# Scenario names without importing the child module (importing it loads the adapter).
NAMES = re.findall(r"^def scenario_(\w+)\(", (Path(__file__).parent / "e2e_child.py").read_text(), re.M)


@pytest.fixture(scope="module")
def results() -> dict:
    built = adapter_build.default_build()
    proc = adapter_build.run_python(
        "import e2e_child; e2e_child.main()", adapter=built.adapter,
        env={"ETRT_TEST_DRIVER": str(built.driver)})
    out = adapter_build.check(proc)
    line = [l for l in out.splitlines() if l.startswith("RESULTS ")]
    assert line, f"child printed no results\n{out}\n{proc.stderr}"
    return json.loads(line[-1][len("RESULTS "):])


@pytest.mark.parametrize("scenario", NAMES)
def test_scenario(scenario, results):
    assert scenario in results, f"scenario {scenario} did not run: {sorted(results)}"
    assert results[scenario] == "ok", results[scenario]
