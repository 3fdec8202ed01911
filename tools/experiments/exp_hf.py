import torch, time, sys
sys.path.insert(0, __import__("os").path.dirname(__import__("os").path.abspath(__file__)))
from transformers import LlamaConfig, LlamaForCausalLM, GenerationConfig
from transformers.integrations.executorch import TorchExportableModuleForDecoderOnlyLM
t0 = time.time()
cfg = LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=64, use_cache=True)
torch.manual_seed(0)
model = LlamaForCausalLM(cfg).eval()
model.generation_config = GenerationConfig(use_cache=True, cache_implementation="static",
                                           cache_config={"batch_size": 1, "max_cache_len": 32})
wrapped = TorchExportableModuleForDecoderOnlyLM(model, batch_size=1, max_cache_len=32)
seq = torch.export.Dim("seq", min=1, max=16)
for name, ids, dyn in (("static-1tok", torch.tensor([[1]]), None),
                       ("dynamic-seq", torch.tensor([[1, 2, 3]]), {"input_ids": {1: seq}, "cache_position": {0: seq}})):
    try:
        ep = wrapped.export(input_ids=ids, cache_position=torch.arange(ids.shape[1]), dynamic_shapes=dyn)
    except Exception as e:
        print(name, "EXPORT FAILED:", type(e).__name__, str(e)[:300]); continue
    sig = ep.graph_signature
    print(f"== {name}: user inputs {sig.user_inputs}, user outputs {sig.user_outputs}")
    print("   buffers:", [(b, tuple(ep.state_dict[b].shape) if b in ep.state_dict else tuple(ep.constants[b].shape)) for b in sig.buffers][:8])
    print("   buffers_to_mutate:", sig.buffers_to_mutate)
    print("   mutation ops:", sorted({str(n.target) for n in ep.graph.nodes if n.op == "call_function" and ("copy" in str(n.target) or "index" in str(n.target) or "scatter" in str(n.target))}))
print("elapsed %.1fs" % (time.time() - t0))
