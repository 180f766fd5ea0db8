"""Lightning Fabric with strategy="ddp" on CPU: launch, seed_everything, one step, its collectives."""
import json, sys
import torch
from lightning.fabric import Fabric
from lightning.fabric.utilities.rank_zero import rank_zero_only

fabric = Fabric(accelerator="cpu", strategy="ddp", devices=4)
fabric.launch()
rank = fabric.global_rank
out = {"rank": rank, "ws": fabric.world_size, "local": fabric.local_rank, "node": fabric.node_rank,
       "zero": fabric.is_global_zero, "rz_rank": rank_zero_only.rank}
fabric.seed_everything(7)
model = torch.nn.Linear(3, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
model, opt = fabric.setup(model, opt)
x = torch.ones(2, 3) * (rank + 1)
loss = model(x).sum()
fabric.backward(loss)
opt.step()
out["w"] = [round(v, 5) for v in model.module.weight.detach().flatten().tolist()]
out["gathered"] = fabric.all_gather(torch.tensor([rank])).flatten().tolist()
out["reduced"] = fabric.all_reduce(torch.tensor([float(rank)]), reduce_op="sum").tolist()
out["bcast"] = fabric.broadcast(rank * 5, src=1)
fabric.barrier()
sys.stdout.write(json.dumps(out, sort_keys=True) + "\n")
