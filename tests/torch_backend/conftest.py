"""The torch.distributed backend tests: each module skips with its reason where torch is not installed."""
