"""Child process of the cold-first-call tests (test_cold_first_call*.py): N
threads make the first calls of one freshly loaded method at one barrier,
each with a batch size between LO and HI; prints {"wrong", "failed",
"entries"} as JSON. The Python executor, if entered, holds its first entrant
inside until every other thread has returned (the interleaving that crashed).

    python cold_calls_child.py PROGRAM THREADS LO HI
"""
import json, os, sys, threading
import torch
import executorch_tensorrt
from executorch.runtime import Runtime
from executorch_tensorrt.runtime.onnxruntime.executor import OnnxRuntimeExecutor

path, threads, lo, hi = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
sys.setswitchinterval(1e-5)
if os.environ.get("DISABLE_BOUNDED_PLAN"):  # to show the test can fail
    OnnxRuntimeExecutor._lasting_plan = lambda self: None
torch.manual_seed(1)
inputs = [torch.randn(lo + t % (hi - lo + 1), 64) for t in range(threads)]
reference = Runtime.get().load_program(path).load_method("forward")
expected = [reference.execute([x])[0].clone() for x in inputs]
entries, returned = [], threading.Semaphore(0)
original = OnnxRuntimeExecutor.execute

def holding(self, args, num_args=None):
    # Entered only by a call that runs Python: the first entrant stays
    # inside until every other thread's call has returned.
    entries.append(1)
    if len(entries) == 1:
        for _ in range(threads - 1):
            returned.acquire(timeout=20)
    return original(self, args, num_args)

OnnxRuntimeExecutor.execute = holding
method = Runtime.get().load_program(path).load_method("forward")  # cold
wrong, failed = [0] * threads, [0] * threads
start = threading.Barrier(threads)

def worker(t):
    start.wait()
    try:
        if not torch.equal(method.execute([inputs[t]])[0], expected[t]):
            wrong[t] += 1
    except RuntimeError:
        failed[t] += 1
    returned.release()

workers = [threading.Thread(target=worker, args=(t,)) for t in range(threads)]
for w in workers:
    w.start()
for w in workers:
    w.join()
print(json.dumps({"wrong": sum(wrong), "failed": sum(failed), "entries": len(entries)}),
      flush=True)
os._exit(0)  # judge outputs only (a dangling stream would crash at exit)
