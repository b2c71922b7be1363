"""HAMi-core for real: a CUDA process under the env our injection computes sees the memory limit.

Needs an NVIDIA GPU with its driver (libcuda.so.1) and a libvgpu.so (``KOORDLET_TEST_LIBVGPU``, default
``/usr/local/vgpu/libvgpu.so``, the path libvgpu dlopens itself from); skipped cleanly otherwise (CI). The CUDA
process is plain Python over the driver API with ctypes (cuInit, cuCtxCreate, cuMemGetInfo, cuMemAlloc), so no
CUDA toolkit or framework is needed.
"""

from __future__ import annotations

import ctypes.util
import json
import os
import subprocess
import sys

import pytest

from hami_bridge.inject import HostLayout, plan

pytestmark = pytest.mark.gpu
LIBVGPU = os.environ.get("KOORDLET_TEST_LIBVGPU", "/usr/local/vgpu/libvgpu.so")

PROBE = r"""
import ctypes, json, sys
cuda = ctypes.CDLL("libcuda.so.1")
def ok(rc, what):
    if rc != 0:
        print(json.dumps({"error": f"{what} -> {rc}"})); sys.exit(0)
ok(cuda.cuInit(0), "cuInit")
dev, ctx = ctypes.c_int(), ctypes.c_void_p()
ok(cuda.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
ok(cuda.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev), "cuCtxCreate")
free, total = ctypes.c_size_t(), ctypes.c_size_t()
ok(cuda.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)), "cuMemGetInfo")
ptr = ctypes.c_uint64()
over = cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(int(sys.argv[1])))
print(json.dumps({"total": total.value, "free": free.value, "over_limit_alloc": over}))
"""


@pytest.fixture(scope="module")
def cuda_ready():
    if ctypes.util.find_library("cuda") is None:
        pytest.skip("no libcuda: no NVIDIA driver on this machine")
    if not os.path.isfile(LIBVGPU):
        pytest.skip(f"no libvgpu.so at {LIBVGPU} (set KOORDLET_TEST_LIBVGPU)")


def test_cuda_process_sees_the_hami_memory_limit(cuda_ready, tmp_path):
    uid = "99999999-2222-3333-4444-555555555555"
    limit = 1 << 30
    injection = plan({"scheduling.koordinator.sh/device-allocated": json.dumps({"gpu": [{
        "minor": 0, "resources": {"koordinator.sh/gpu-memory": str(limit), "koordinator.sh/gpu-core": "50",
                                  "koordinator.sh/gpu-memory-ratio": "10"}}]})},
        {"koordinator.sh/gpu-isolation-provider": "HAMi-core"}, uid, "cuda", HostLayout(libvgpu=LIBVGPU))
    env = {**os.environ, **injection.env}
    # on the host there are no container mounts: the shared region goes to a scratch file, libvgpu stays where it is
    env["CUDA_DEVICE_MEMORY_SHARED_CACHE"] = str(tmp_path / "vgpu.cache")
    env["LD_PRELOAD"] = LIBVGPU
    env.pop("NVIDIA_VISIBLE_DEVICES")      # the toolkit's variable; outside a container it would mean nothing
    out = subprocess.run([sys.executable, "-c", PROBE, str(2 * limit)], env=env, capture_output=True, text=True,
                         timeout=120)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert "error" not in result, (result, out.stderr[-2000:])
    assert result["total"] == limit
    assert result["free"] <= limit
    assert result["over_limit_alloc"] != 0          # CUDA_ERROR_OUT_OF_MEMORY (2) from libvgpu's accounting
