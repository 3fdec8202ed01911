"""The adapter's BackendInterface, driven end to end.

libadapter_driver.so calls the registered TensorRTBackend's init/execute/
destroy as an ExecuTorch Method does; e2e_child.py installs a tiny Python
executor table and checks what reaches it and what comes back (outputs,
resize, error codes, the stderr line, last_error); its last scenario runs a
real exported program through executorch.runtime. All scenarios, error cases
included, run in one child process (loading executorch.runtime costs
seconds); each is reported as its own test, and the child must have run
exactly the scenarios listed here.
"""

from __future__ import annotations

import json

import pytest

import adapter_build

SCENARIOS = [
    "no_executor",
    "install_rejects_bad_tables",
    "roundtrip",
    "device_tag",
    "wrong_arity",
    "executor_init_error",
    "executor_execute_error",
    "resize_past_capacity",
    "invalid_blob",
    "fallback_wrong_type",
    "device_option",
    "executor_unavailable",
    "handles_outlive_reinstall",
    "last_error_and_validate",
    "last_error_is_scoped_to_the_call",
    "last_error_is_per_thread",
    "real_runtime_last_error",
]


@pytest.fixture(scope="module")
def results(exported) -> dict:
    _, _, pte = exported("cnn")
    built = adapter_build.default_build()
    proc = adapter_build.run_python(
        "import e2e_child; e2e_child.main()", adapter=built.adapter,
        env={"ETRT_TEST_DRIVER": str(built.driver), "ETRT_TEST_PTE": str(pte)})
    out = adapter_build.check(proc)
    line = [l for l in out.splitlines() if l.startswith("RESULTS ")]
    assert line, f"child printed no results\n{out}\n{proc.stderr}"
    return json.loads(line[-1][len("RESULTS "):])


def test_every_scenario_ran(results):
    assert list(results) == SCENARIOS, (
        f"the child ran {list(results)}, expected {SCENARIOS} (a scenario added to "
        "e2e_child.py must be listed here, and every listed one must run)")


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_scenario(scenario, results):
    assert scenario in results, f"scenario {scenario} did not run: {sorted(results)}"
    assert results[scenario] == "ok", results[scenario]
