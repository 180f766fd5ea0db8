"""import simcluster.torch: registers the backend; without torch, says how to install it."""

from __future__ import annotations

import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

import simcluster.torch as sctorch  # noqa: E402


def test_import_registers_the_backend_for_the_cpu() -> None:
    assert sctorch.BACKEND == "simcluster"
    assert dist.Backend.SIMCLUSTER == "simcluster"
    assert "simcluster" in dist.Backend.backend_list
    assert "cpu" in dist.Backend.backend_capability["simcluster"]
    assert dist.Backend.default_device_backend_map["cpu"] == "gloo"  # gloo stays the default


def test_without_torch_the_import_error_says_how_to_install_it() -> None:
    code = ("import sys; sys.modules['torch'] = None\n"
            "try:\n    import simcluster.torch\n"
            "except ImportError as exc:\n    print(exc)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().endswith("install it with pip install 'simcluster[torch]'")
    assert out.stdout.startswith("simcluster.torch needs torch (")


def test_the_simcluster_torch_package_never_shadows_torch() -> None:
    import simcluster.torch._process_group as pg

    assert pg.torch is torch
    assert sys.modules["torch"] is torch
