"""Model-parallel groups kept in module globals, as Megatron-LM's parallel_state does."""
import functools
import logging
import torch.distributed as dist

_TP_GROUP = None
_DP_GROUP = None
_TP_RANKS = None
logger = logging.getLogger(__name__)


def initialize_model_parallel(tp_size):
    global _TP_GROUP, _DP_GROUP, _TP_RANKS
    assert _TP_GROUP is None, "model parallel group is already initialized"
    world, rank = dist.get_world_size(), dist.get_rank()
    for start in range(0, world, tp_size):
        ranks = list(range(start, start + tp_size))
        group = dist.new_group(ranks)
        if rank in ranks:
            _TP_GROUP, _TP_RANKS = group, ranks
    for offset in range(tp_size):
        ranks = list(range(offset, world, tp_size))
        group = dist.new_group(ranks)
        if rank in ranks:
            _DP_GROUP = group
    logger.info("rank %d: tp ranks %s", rank, _TP_RANKS)


def get_tensor_model_parallel_group():
    assert _TP_GROUP is not None, "not initialized"
    return _TP_GROUP


def get_data_parallel_group():
    return _DP_GROUP


@functools.lru_cache(maxsize=None)
def get_tensor_model_parallel_rank():
    return dist.get_rank(group=_TP_GROUP)


@functools.lru_cache(maxsize=None)
def get_world_size_cached():
    return dist.get_world_size()
