"""Optimization profiles: the `profiles` option and the profiles that dynamic dimensions of torch.export resolve to."""
