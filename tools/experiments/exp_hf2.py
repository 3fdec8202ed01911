import torch, sys, json
sys.path.insert(0, __import__("os").path.dirname(__import__("os").path.abspath(__file__)))
import toy_backend as tb
from transformers import LlamaConfig, LlamaForCausalLM, GenerationConfig
from transformers.integrations.executorch import TorchExportableModuleForDecoderOnlyLM
from executorch.exir import to_edge_transform_and_lower, EdgeCompileConfig
cfg = LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=64, use_cache=True)
torch.manual_seed(0); model = LlamaForCausalLM(cfg).eval()
model.generation_config = GenerationConfig(use_cache=True, cache_implementation="static", cache_config={"batch_size": 1, "max_cache_len": 32})
w = TorchExportableModuleForDecoderOnlyLM(model, batch_size=1, max_cache_len=32)
seq = torch.export.Dim("seq", min=1, max=16)
ep = w.export(input_ids=torch.tensor([[1, 2, 3]]), cache_position=torch.arange(3), dynamic_shapes={"input_ids": {1: seq}, "cache_position": {0: seq}})
edge = to_edge_transform_and_lower(ep, partitioner=[tb.AllPartitioner()], compile_config=EdgeCompileConfig(_check_ir_validity=False))
top = edge.exported_program()
print("top-level input specs:", [(s.kind.name, s.target) for s in top.graph_signature.input_specs])
print("top-level output specs:", [(s.kind.name, s.target) for s in top.graph_signature.output_specs])
print("delegates:", [n.name for n in top.graph.nodes if n.op == "get_attr"])
info = tb.SEEN[-1]
print("delegate inputs:", [(k, t) for k, _, t in info["inputs"] if k != "PARAMETER"])
print("delegate outputs:", info["outputs"])
print("constants given to preprocess:", info["constants"])
et = edge.to_executorch()
plan = et.executorch_program.execution_plan[0]
print("operators outside delegates:", [o.name for o in plan.operators], "| delegates:", [d.id for d in plan.delegates])
