"""What export does around torch.export: the CIA-op set kept for one export
(cia_ops_cache.py), and MoE experts traced in a form TensorRT takes
(moe_experts.py)."""
