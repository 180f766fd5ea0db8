"""accelerate: state singletons, reset and rebuilt, its collectives and helpers, one DDP step."""
import json, os, sys
import torch
from accelerate import Accelerator, PartialState
from accelerate.state import AcceleratorState
from accelerate.utils import gather, reduce, broadcast, gather_object

AcceleratorState._reset_state(reset_partial_state=True)
acc = Accelerator(cpu=True)
state = PartialState()
rank = state.process_index
out = {"rank": rank, "n": acc.num_processes, "local": state.local_process_index,
       "main": state.is_main_process, "local_main": state.is_local_main_process,
       "last": state.is_last_process, "dist": str(state.distributed_type)}
t = torch.tensor([float(rank + 1)])
out["gather"] = gather(t).tolist()
out["reduce"] = reduce(t.clone(), reduction="sum").tolist()
out["bcast"] = broadcast(torch.tensor([float(rank * 10)]), from_process=1).tolist()
out["objs"] = gather_object([f"r{rank}"])
with state.split_between_processes(list(range(10))) as part:
    out["split"] = part
with state.split_between_processes(list(range(7)), apply_padding=True) as part:
    out["split_pad"] = part
order = []
with acc.main_process_first():
    order.append(rank)
out["order"] = order
torch.manual_seed(0)
model = torch.nn.Linear(2, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
model, opt = acc.prepare(model, opt)
out["model_type"] = type(model).__name__
x = torch.ones(4, 2) * (rank + 1)
loss = model(x).sum()
acc.backward(loss)
opt.step()
out["w"] = [round(v, 5) for v in acc.unwrap_model(model).weight.detach().flatten().tolist()]
acc.wait_for_everyone()
AcceleratorState._reset_state(reset_partial_state=True)
acc2 = Accelerator(cpu=True)
out["after_reset"] = [acc2.num_processes, acc2.process_index]
sys.stdout.write(json.dumps(out, sort_keys=True) + "\n")
