"""Predict a Llama 3 training step on GPUs you do not have: torchtitan's setup, run on shapes.

Every rank builds a Llama 3 model on the meta device (simcluster.predict.llama), shards it as
torchtitan does (tensor parallel if asked, activation checkpointing per block, FSDP2 with bfloat16
parameters and float32 gradient reduction), and trains with AdamW. Under ``--fake`` no tensor holds
data; with ``--compute gpu:DEVICE`` each op is charged its predicted time on that GPU, and the
collectives are timed by the platform of ``--latency``. The small run checked here is

    simcluster torchrun --fake --nproc-per-node 4 --latency dgx_h100:1 --compute gpu:h100_hbm2e_500w examples/torch/12_predict_llama.py --model tiny --local-batch 2 --seq 256 --steps 2

and the published torchtitan configuration (Llama 3.1 8B, 8 GPUs, local batch 2, sequence 8192,
selective op checkpointing) is the same command with ``--nproc-per-node 8`` and ``--model 8b
--local-batch 2 --seq 8192 --ac selective --steps 3`` (docs/predict.md, "Predicting Llama").
``--pp N --pp-schedule NAME --microbatches M`` adds pipeline parallel, torchtitan's way: each rank
runs its stages of the model through torch's schedule (docs/predict.md, "Predicting with
pipeline parallel").

Rank 0 prints the setup, then per step the virtual step time (``time.perf_counter()`` is the
rank's virtual clock), tokens per second per GPU, MFU when ``--mfu-device`` names a preset, and
the step's peak of live tensor bytes on the rank (``simcluster.predict.memory.MemoryTracker``,
in CUDA caching-allocator blocks). The loss is printed as unknown in a shape-only run: it depends
on data no rank holds. The same script runs under real torchrun on GPUs, where it prints
measured times and the loss.
"""

import argparse
import os
import time

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

from simcluster.predict import DEVICES
from simcluster.predict import llama
from simcluster.predict.memory import MemoryTracker

DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32}


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="8b", choices=sorted(llama.CONFIGS), help="model size (default 8b)")
    parser.add_argument("--local-batch", type=int, default=2, help="sequences per data-parallel rank")
    parser.add_argument("--seq", type=int, default=8192, help="sequence length in tokens")
    parser.add_argument("--ac", default="selective", choices=llama.AC_MODES,
                        help="activation checkpointing: none, full, or torchtitan's selective op")
    parser.add_argument("--tp", type=int, default=1, help="tensor-parallel degree (ranks of a node)")
    parser.add_argument("--pp", type=int, default=1, help="pipeline-parallel degree (stages over ranks)")
    parser.add_argument("--pp-schedule", default="1F1B",
                        help="pipeline schedule, as torch's get_schedule_class names it: GPipe, 1F1B, "
                             "Interleaved1F1B, ... (default 1F1B)")
    parser.add_argument("--microbatches", type=int, default=0,
                        help="pipeline microbatches per step (default: the pipeline degree)")
    parser.add_argument("--dp", type=int, default=0, help="FSDP degree (default: world size / (tp x pp))")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--dtype", default="bfloat16", choices=sorted(DTYPES),
                        help="FSDP2 parameter dtype in compute (gradients are reduced in float32)")
    parser.add_argument("--mfu-device", default="", choices=["", *sorted(DEVICES)],
                        help="print MFU against this preset's bfloat16 peak, as torchtitan does")
    parser.add_argument("--memory-table", action="store_true",
                        help="print rank 0's peak memory of the last step by category")
    return parser.parse_args()


def loss_text(loss: torch.Tensor | None) -> str:
    """The loss, or "unknown" in a shape-only run (simcluster refuses to invent a value)."""
    if loss is None:
        return "on the last pipeline stage's ranks"
    try:
        return f"{loss.item():.4f}"
    except RuntimeError as exc:
        if "shape-only run" not in str(exc):
            raise
        return "unknown (shape-only run)"


def clip_grad_norm(parameters: list[torch.Tensor], max_norm: float, pp_mesh: object) -> None:
    """Clip the gradients at a total norm over the whole model, as torchtitan's ``clip_grad_norm_``
    does: with pipeline parallel, each stage's squared norm is summed over the pipeline ranks."""
    if pp_mesh is None:
        torch.nn.utils.clip_grad_norm_(parameters, max_norm=max_norm, foreach=True)
        return
    grads = [p.grad for p in parameters if p.grad is not None]
    total = torch.nn.utils.get_total_norm(grads, foreach=True)
    if hasattr(total, "full_tensor"):  # FSDP2's gradients are DTensors: the norm is one too
        total = total.full_tensor()
    total = total ** 2
    dist.all_reduce(total, group=pp_mesh.get_group())
    torch.nn.utils.clip_grads_with_norm_(parameters, max_norm, total ** 0.5, foreach=True)


def main() -> None:
    args = arguments()
    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if torch.cuda.is_available() \
        else torch.device("cpu")
    dp = args.dp or world // (args.tp * args.pp)
    if args.pp * dp * args.tp != world:
        raise SystemExit(f"--pp {args.pp} x --dp {dp} x --tp {args.tp} is not the world size {world}")
    pp_mesh = None
    if args.pp > 1:  # torchtitan's mesh order: pipeline outermost, tensor parallel innermost
        mesh = init_device_mesh(device.type, (args.pp, dp, args.tp), mesh_dim_names=("pp", "dp", "tp"))
        dp_mesh, pp_mesh = mesh["dp"], mesh["pp"]
        tp_mesh = mesh["tp"] if args.tp > 1 else None
    elif args.tp > 1:
        mesh = init_device_mesh(device.type, (dp, args.tp), mesh_dim_names=("dp", "tp"))
        dp_mesh, tp_mesh = mesh["dp"], mesh["tp"]
    else:
        dp_mesh, tp_mesh = init_device_mesh(device.type, (dp,), mesh_dim_names=("dp",)), None

    model = llama.build(args.model, seq_len=args.seq)  # on the meta device: no memory taken
    config = model.config
    # with --pp, a Pipeline: this rank's stages of the model and the schedule that runs them
    model = llama.parallelize(model, dp_mesh=dp_mesh, tp_mesh=tp_mesh, ac=args.ac,
                              param_dtype=DTYPES[args.dtype], pp_mesh=pp_mesh,
                              pp_schedule=args.pp_schedule, pp_microbatches=args.microbatches or None)
    model.to_empty(device=device)
    model.init_weights()
    optimizer = torch.optim.AdamW(model.parameters(), lr=8e-4, betas=(0.9, 0.95), weight_decay=0.1,
                                  foreach=True)
    parts = model.parts if pp_mesh is not None else [model]
    tracker = MemoryTracker().track(*parts, optimizer)
    tokens_per_gpu = args.local_batch * args.seq / (args.tp * args.pp)
    flops_per_token = config.flops_per_token(args.seq)
    peak = DEVICES[args.mfu_device].peak("bfloat16") if args.mfu_device else 0.0
    if rank == 0:
        count = config.parameters()
        size = f"{count / 1e9:.2f}B" if count >= 1e9 else f"{count / 1e6:.2f}M"
        layout = f"PP {args.pp} x FSDP {dp} x TP {args.tp}" if args.pp > 1 else f"FSDP {dp} x TP {args.tp}"
        print(f"Llama 3 {args.model}: {size} parameters, {world} ranks "
              f"({layout}), local batch {args.local_batch} x {args.seq} tokens, "
              f"activation checkpointing {args.ac}, parameters in {args.dtype}")

    for step in range(1, args.steps + 1):
        tokens = torch.randint(config.vocab_size, (args.local_batch, args.seq), device=device)
        labels = torch.randint(config.vocab_size, (args.local_batch, args.seq), device=device)
        dist.barrier()
        tracker.reset_peak()
        start = time.perf_counter()
        with tracker:
            optimizer.zero_grad()
            if pp_mesh is not None:  # the schedule runs forward and backward per microbatch
                loss = model.step(tokens, labels)
            else:
                loss = llama.loss_fn(model(tokens), labels)
                loss.backward()
            clip_grad_norm(model.parameters(), 1.0, pp_mesh)
            optimizer.step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        seconds = time.perf_counter() - start
        if rank == 0:
            rate = tokens_per_gpu / seconds
            mfu = f", MFU {100 * rate * flops_per_token / peak:.1f}%" if peak else ""
            print(f"step {step}: {seconds:.4f} s, {rate:,.0f} tokens/s per GPU{mfu}, "
                  f"peak memory {tracker.peak / 2**30:.2f} GiB, loss {loss_text(loss)}")
    if rank == 0 and args.memory_table:
        print(tracker.report().table())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
