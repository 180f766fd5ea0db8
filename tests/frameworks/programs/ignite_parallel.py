"""ignite: idist.Parallel with ranks reaching idist at different times, its helpers, auto_model/auto_dataloader."""
import json, os, sys, time
import torch
import ignite.distributed as idist

def training(local_rank, config):
    rank = int(os.environ["RANK"])
    time.sleep(rank * 0.1)
    out = {"rank": idist.get_rank(), "local_rank": idist.get_local_rank(), "ws": idist.get_world_size(),
           "nproc_per_node": idist.get_nproc_per_node(), "nnodes": idist.get_nnodes(),
           "node_rank": idist.get_node_rank(), "backend": idist.backend(), "arg_local": local_rank,
           "config": config["x"]}
    t = torch.tensor([float(rank + 1)])
    out["all_reduce"] = idist.all_reduce(t).tolist()
    out["all_gather"] = idist.all_gather(torch.tensor([rank])).tolist()
    out["bcast"] = idist.broadcast(torch.tensor([rank * 3.0]), src=2).tolist()
    out["gather_str"] = idist.all_gather(f"s{rank}")
    torch.manual_seed(0)
    model = idist.auto_model(torch.nn.Linear(3, 1))
    out["model"] = type(model).__name__
    data = list(range(16))
    loader = idist.auto_dataloader(data, batch_size=8, shuffle=False)
    out["batches"] = [b.tolist() for b in loader]
    out["dev"] = str(idist.device())
    idist.barrier()
    sys.stdout.write(json.dumps(out, sort_keys=True) + "\n")

with idist.Parallel(backend="gloo") as parallel:
    parallel.run(training, {"x": 5})
