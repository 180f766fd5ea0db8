"""A Megatron-style package: model-parallel state in module globals."""
