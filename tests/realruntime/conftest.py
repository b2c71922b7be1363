"""Fixtures of the real-runtime tests: a real containerd with NRI, pods driven through CRI as the kubelet drives them,
and the agent as its own daemon connected to containerd's NRI socket.

- ``runtime`` (session, parametrized): each containerd of ``doubles.containerd.RUNTIMES``, 1.7 and 2.x; every test
  that uses a runtime runs once against each (ids ``containerd-1.7``, ``containerd-2``), all of one runtime's first.
- ``runtime_images`` (session): the pause and busybox OCI archives (doubles/ociimage.py), built once per session
  under the session's tmp dir.
- ``node`` (module, per runtime): a cgroup test root in every hierarchy with the kubelet's QoS tiers, containerd
  started on it (doubles/containerd.py: its own root, state, sockets and mount namespace under a temp dir) with the
  images imported, and a :class:`~doubles.cri.Kubelet` over its CRI socket. Stopped by PID, everything removed, at
  the end of the module.
- ``agent`` (module, per runtime): ``koordlet run --standalone`` without a pods file (pods from the cgroup tree, as
  a standalone agent on a node without a pod list runs), pointed at the test root and containerd's NRI socket, with
  the GPU env and oom_score_adj gates on and a stand-in ``libvgpu.so``.

Where a runtime cannot run (not root, no cgroup v1, that containerd or runc missing: run .ci/install-runtime) its
tests skip with the reason, unless ``KOORDLET_REQUIRE_RUNTIME=1`` (CI), which fails them instead.
All of a module's tests run in one pytest-xdist worker (``xdist_group``; ``make test`` distributes by group), so
one containerd and one agent serve them all.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from doubles import containerd
from doubles.agentproc import AgentProcess
from doubles.cri import CRIClient, Kubelet
from doubles.ociimage import ImageError, archive, busybox_image, pause_image

REQUIRED = os.environ.get("KOORDLET_REQUIRE_RUNTIME", "") not in ("", "0")
RECONCILE_INTERVAL = 1.0            # the agent's --reconcile-interval-seconds here


def unavailable(reason: str) -> None:
    if REQUIRED:
        pytest.fail(f"KOORDLET_REQUIRE_RUNTIME is set but the real runtime cannot run: {reason}", pytrace=False)
    pytest.skip(reason)


@dataclass(frozen=True)
class Images:
    pause: str            # refs
    busybox: str
    pause_archive: str    # OCI archives
    busybox_archive: str


@dataclass
class Node:
    """One host: containerd, the test cgroup root, and the kubelet's side of CRI."""
    runtime: containerd.Containerd
    cgroups: containerd.CgroupRoots
    kubelet: Kubelet
    images: Images
    link_root: str

    @property
    def cri(self) -> CRIClient:
        return self.kubelet.client


@pytest.fixture(scope="session", params=containerd.RUNTIMES, ids=[r.name for r in containerd.RUNTIMES])
def runtime(request: pytest.FixtureRequest) -> containerd.Runtime:
    rt: containerd.Runtime = request.param
    reason = containerd.missing(rt)
    if reason:
        unavailable(reason)
    return rt


@pytest.fixture(scope="session")
def runtime_images(tmp_path_factory: pytest.TempPathFactory) -> Images:
    reason = containerd.missing()
    if reason:
        unavailable(reason)
    workdir = tmp_path_factory.mktemp("images")
    try:
        pause, busybox = pause_image(str(workdir)), busybox_image()
    except ImageError as e:
        unavailable(str(e))
        raise
    paths = []
    for image in (pause, busybox):
        path = workdir / (image.ref.rsplit("/", 1)[1].replace(":", "-") + ".tar")
        path.write_bytes(archive(image))
        paths.append(str(path))
    return Images(pause.ref, busybox.ref, *paths)


@pytest.fixture(scope="module")
def node(runtime: containerd.Runtime, runtime_images: Images,
         tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    bin_dir = containerd.runtime_dir(runtime)
    assert bin_dir is not None                         # the runtime fixture checked containerd.missing(runtime)
    link_root = tmp_path_factory.mktemp("cgroup")
    roots = containerd.CgroupRoots(str(link_root))
    rt: containerd.Containerd | None = None
    client: CRIClient | None = None
    try:
        rt = containerd.Containerd(bin_dir, roots, runtime_images.pause)
        rt.start()
        rt.import_image(runtime_images.pause_archive)
        rt.import_image(runtime_images.busybox_archive)
        client = CRIClient(rt.socket)
        kubelet = Kubelet(client, roots)
        kubelet.setup()
        yield Node(rt, roots, kubelet, runtime_images, str(link_root))
    finally:
        if client is not None:
            client.close()
        try:
            if rt is not None:
                rt.close()
        finally:
            roots.cleanup()


@dataclass(frozen=True)
class HamiHost:
    libvgpu: str                    # the stand-in libvgpu.so given to the agent
    content: bytes


@pytest.fixture(scope="module")
def hami_host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HamiHost]:
    """A stand-in ``libvgpu.so`` (any file: nothing loads it here) and HAMi-core's lock dir on the host,
    ``/tmp/vgpulock`` (made for the module when missing, removed after if it was)."""
    path = tmp_path_factory.mktemp("hami") / "libvgpu.so"
    content = b"stand-in for HAMi-core's libvgpu.so\n"
    path.write_bytes(content)
    lock = "/tmp/vgpulock"
    made = not os.path.isdir(lock)
    if made:
        os.makedirs(lock, mode=0o777)
    try:
        yield HamiHost(str(path), content)
    finally:
        if made:
            with contextlib.suppress(OSError):
                os.rmdir(lock)


@pytest.fixture(scope="module")
def agent(node: Node, hami_host: HamiHost, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentProcess]:
    workdir = tmp_path_factory.mktemp("agent")
    proc = AgentProcess(str(workdir), [
        "--cgroup-root-dir", node.link_root, "--cgroup-driver", "cgroupfs", "--proc-root-dir", "/proc/",
        "--reconcile-interval-seconds", f"{RECONCILE_INTERVAL:.0f}", "--node-topology-sync-interval", "1s",
        # containerd's NRI socket, named as the agent's option names it: relative to the host's /var/run
        "--var-run-root-dir", os.path.dirname(node.runtime.nri_socket),
        "--runtime-hooks-nri-socket-path", os.path.basename(node.runtime.nri_socket),
        # the default budget is 100 ms; on a loaded 2-core CI host a hook may need more, and an empty (fail-open)
        # answer would read as a wrong one here. Within half the 4 s request timeout both runtimes have here
        # (doubles/containerd.py), so containerd 2.x, which gives every request that deadline, leaves it in force.
        "--runtime-hooks-nri-hook-budget", "1.5s",
        "--hami-core-library-directory-path", hami_host.libvgpu,
        "--feature-gates", "GPUEnvInject=true,OOMScoreAdj=true",
    ])
    proc.start()
    try:
        proc.wait(lambda: proc.metric("koordlet_nri_connected") == 1, 60, "the NRI plugin to register with containerd")
        proc.wait(proc.ready, 60, "/readyz")
        yield proc
    finally:
        proc.stop()
