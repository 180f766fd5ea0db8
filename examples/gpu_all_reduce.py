"""All-reduce on CuPy arrays: every rank's GPU array is summed in place, on the GPU.

Needs CuPy and a CUDA device (``pip install 'simcluster[cuda]'``); without them
it prints why it cannot run and exits cleanly, so it runs anywhere. On the
memory transport the arrays never leave the device: messages carry the CuPy
arrays themselves, copies are device to device, and the sums are computed by
CuPy. (On shm and tcp they are staged through host memory and land in a CuPy
array on the receiver.)

You will see each rank's result, 1 + 2 + 3 + 4 = 10 in every element, still a
CuPy float32 array on the GPU it started on.
"""

from __future__ import annotations

import warnings

import simcluster as sc
from simcluster import arrays


def gpu_problem() -> str | None:
    """Return why CuPy cannot run here, or None when it can."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # CuPy warns at import when it finds no CUDA toolkit
        try:
            import cupy
        except ImportError:
            return "CuPy is not installed (pip install 'simcluster[cuda]')"
        except Exception:
            return "CuPy is installed but finds no usable CUDA device"
        try:
            count = cupy.cuda.runtime.getDeviceCount()
        except Exception:  # no driver: CUDARuntimeError
            count = 0
    return None if count else "CuPy is installed but finds no usable CUDA device"


async def main(comm: sc.Comm) -> str:
    import cupy

    x = cupy.full(4, comm.rank + 1, dtype=cupy.float32)  # on the current GPU
    await comm.all_reduce(x, op=sc.ReduceOp.SUM)  # in place, as torch.distributed does
    values = arrays.to_host(x).tolist()  # explicit copy to the host, for printing
    return f"rank {comm.rank}: {arrays.describe(x)} on GPU {x.device.id}: {values}"


if __name__ == "__main__":
    problem = gpu_problem()
    if problem is not None:
        print(f"skipped: this example needs CuPy and a CUDA device; {problem}")
    else:
        for line in sc.run(main, world_size=4):
            print(line)
