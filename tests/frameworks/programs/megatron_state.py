"""A Megatron-style parallel_state package, and per-process torch and logging settings that differ by rank."""
import json, logging, os, sys
import torch
import torch.distributed as dist
from mini_megatron import parallel_state as ps

rank = int(os.environ["RANK"])
if rank % 2:
    torch.set_default_dtype(torch.float64)
torch.use_deterministic_algorithms(rank == 3)
logging.basicConfig(level=logging.INFO if rank == 0 else logging.WARNING, format=f"[{rank}] %(message)s")
dist.init_process_group("gloo")
ps.initialize_model_parallel(2)
out = {"rank": rank, "tp_rank": ps.get_tensor_model_parallel_rank(), "ws": ps.get_world_size_cached()}
t = torch.tensor([float(rank + 1)], dtype=torch.float32)
dist.all_reduce(t, group=ps.get_tensor_model_parallel_group())
out["tp_sum"] = t.tolist()
d = torch.tensor([float(rank)], dtype=torch.float32)
dist.all_reduce(d, group=ps.get_data_parallel_group())
out["dp_sum"] = d.tolist()
out["dtype"] = str(torch.get_default_dtype())
out["ones_dtype"] = str(torch.ones(1).dtype)
out["det"] = torch.are_deterministic_algorithms_enabled()
out["log_level"] = logging.getLogger().level
out["handlers"] = len(logging.getLogger().handlers)
dist.barrier()
sys.stdout.write(json.dumps(out, sort_keys=True) + "\n")
dist.destroy_process_group()
