"""The image ``make image`` builds (image/build.py: Debian 12 from its packages, the agent in a venv, no registry) run
under a real containerd as deploy/koordlet.yaml runs it.

The image is built once per session into the session's tmp dir (the Debian root is cached in
``KOORDLET_IMAGE_CACHE``, default /var/cache/koordlet-ci/image, for a week: the first build debootstraps, about a
minute, the later ones take half that), or taken from ``KOORDLET_IMAGE_ARCHIVE`` (``make image``'s output) when set.
It is imported with ``ctr images import`` and run through CRI as the kubelet runs the DaemonSet's pod: a sandbox and
a container with the host's network and PID namespace, privileged, the container's command, args, env, resources
and every volume mount read from deploy/koordlet.yaml (hostPath -> mountPath, read-only where it says so). What this
test changes, and why:

- the agent's own state (the ``DirectoryOrCreate`` volumes: metric cache, checkpoints, the PodResources proxy's
  socket dir) is in the test's tmp dir, as is any ``Directory`` this machine lacks (``/var/lib/kubelet`` without a
  kubelet); mount propagation is private: this containerd runs in a private mount namespace (doubles/containerd.py),
  where a Bidirectional or HostToContainer mount is refused;
- the environment adds what a cluster would give: ``KOORDLET_STANDALONE=true`` (no API server here: pods from the
  cgroup tree), a free port (``KOORDLET_ADDR``; the host's network is shared with whatever else runs) and the NRI
  socket path of this test's containerd (its directory is under /run, so the agent reaches it through the
  DaemonSet's ``/host-var-run/`` mount, as it reaches the node runtime's ``nri/nri.sock``).

"The host" the containerized agent sees is this machine through the DaemonSet's mounts: its /proc (hostPID), its
/sys, and as its cgroup tree the test root that stands in for every hierarchy in containerd's namespace.

1. the archive: entrypoint, env, ``/koordlet``, every file root's and none writable by others, what was trimmed;
2. from outside: /metrics and /readyz on the host's network, the process in the host's PID and network namespace,
   its own pod found in the host's cgroup tree, registered with the runtime over NRI;
3. ``koordlet doctor`` inside (ExecSync) sees the host roots, cgroup v1, the kubepods tree, enforcement, NRI;
4. ``koordlet report --once`` inside: the NodeMetric and NodeResourceTopology of this machine.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import stat
import tarfile
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from doubles import containerd
from doubles.agentproc import free_port
from doubles.cri import CRIClient, Kubelet, Pod, Resources, RunningPod
from image import build as image_build
from koordlet._proto.cri import api_pb2 as cri
from koordlet.host.cgroup import parse_cpu_list
from tests.realruntime.conftest import Images, unavailable

pytestmark = [pytest.mark.root, pytest.mark.xdist_group("realruntime-image")]

REPO = Path(__file__).resolve().parents[2]
MANIFEST = REPO / "deploy" / "koordlet.yaml"
REF = "localhost/koordlet-test/koordlet:1"
CACHE = os.environ.get("KOORDLET_IMAGE_CACHE", "/var/cache/koordlet-ci/image")
NODE_NAME = "rt-image-node"
WAIT = 120.0
MI = 1 << 20


# ---- the image --------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class AgentImage:
    archive: str
    ref: str


@pytest.fixture(scope="session")
def agent_image(tmp_path_factory: pytest.TempPathFactory) -> AgentImage:
    prebuilt = os.environ.get("KOORDLET_IMAGE_ARCHIVE")
    if prebuilt:
        index = json.loads(_member(prebuilt, "index.json"))
        return AgentImage(prebuilt, index["manifests"][0]["annotations"]["io.containerd.image.name"])
    reason = image_build.missing()
    if reason:
        unavailable(reason)
    out = tmp_path_factory.mktemp("agent-image") / "koordlet-image.tar"
    start = time.monotonic()
    result = image_build.build(str(out), ref=REF, cache=CACHE)
    print(f"image built in {time.monotonic() - start:.0f} s ({result.seconds}): {result.size / MI:.1f} MiB, "
          f"{result.unpacked / MI:.1f} MiB unpacked")
    return AgentImage(result.archive, result.ref)


def _member(archive: str, name: str) -> bytes:
    with tarfile.open(archive) as tar:
        f = tar.extractfile(name)
        assert f is not None, f"{name} missing from {archive}"
        return f.read()


def _blob(archive: str, digest: str) -> bytes:
    return _member(archive, "blobs/sha256/" + digest.removeprefix("sha256:"))


# ---- the DaemonSet, as the kubelet would run it ----------------------------------------------------------------

def daemonset() -> dict[str, Any]:
    with open(MANIFEST, encoding="utf-8") as f:
        (ds,) = [d for d in yaml.safe_load_all(f) if d and d.get("kind") == "DaemonSet"]
    return ds


def quantity_milli(value: str) -> int:
    return int(value[:-1]) if value.endswith("m") else int(float(value) * 1000)


def quantity_bytes(value: str) -> int:
    units = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30}
    return int(value[:-2]) * units[value[-2:]] if value[-2:] in units else int(value)


@dataclass
class Deployed:
    node: Kubelet
    runtime: containerd.Containerd
    cgroups: containerd.CgroupRoots
    pod: RunningPod
    container_id: str
    port: int
    logs: Path
    command: list[str]

    @property
    def cri(self) -> CRIClient:
        return self.node.client

    def get(self, path: str, timeout: float = 5.0) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=timeout) as r:
                return int(r.status), r.read().decode()
        except urllib.error.HTTPError as e:
            return int(e.code), e.read().decode()

    def metric(self, name: str) -> float | None:
        try:
            _, text = self.get("/metrics")
        except OSError:
            return None
        values = [float(line.rpartition(" ")[2]) for line in text.splitlines()
                  if line.startswith((name + "{", name + " "))]
        return sum(values) if values else None

    def log(self) -> str:
        path = self.logs / "koordlet.log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else "(no container log)"

    def wait(self, predicate: Any, what: str, timeout: float = WAIT) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            try:
                if predicate():
                    return
            except OSError:
                pass
            status, _ = self.cri.container_status(self.container_id)
            if status.state == cri.CONTAINER_EXITED:
                raise AssertionError(f"the agent's container exited ({status.exit_code}) waiting for {what}:\n"
                                     f"{self.log()}")
            time.sleep(0.2)
        raise AssertionError(f"timed out waiting for {what}:\n{self.log()}")

    def exec(self, *cmd: str, timeout: int = 120) -> tuple[int, str, str]:
        r = self.cri.exec_sync(self.container_id, cmd, timeout=timeout)
        return r.exit_code, r.stdout, r.stderr


def mounts(spec: dict[str, Any], container: dict[str, Any], scratch: Path) -> list[cri.Mount]:
    """The container's volumeMounts over the pod's hostPath volumes, as the kubelet hands them to the runtime."""
    volumes = {v["name"]: v["hostPath"] for v in spec["volumes"]}
    out = []
    for m in container["volumeMounts"]:
        host = volumes[m["name"]]
        path = host["path"]
        if host.get("type") == "DirectoryOrCreate" or not os.path.isdir(path):
            path = str(scratch / m["name"])                 # the agent's own state, or what this machine lacks
            os.makedirs(path, exist_ok=True)
        out.append(cri.Mount(container_path=m["mountPath"], host_path=path, readonly=bool(m.get("readOnly")),
                             propagation=cri.PROPAGATION_PRIVATE))
    return out


@pytest.fixture(scope="module")
def deployed(runtime: containerd.Runtime, agent_image: AgentImage, runtime_images: Images,
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployed]:
    bin_dir = containerd.runtime_dir(runtime)
    assert bin_dir is not None                         # the runtime fixture checked containerd.missing(runtime)
    ds = daemonset()
    spec = ds["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    assert spec["hostNetwork"] and spec["hostPID"] and container["securityContext"]["privileged"]
    link_root = tmp_path_factory.mktemp("cgroup")
    scratch = tmp_path_factory.mktemp("daemonset")
    logs = scratch / "logs"
    logs.mkdir()
    roots = containerd.CgroupRoots(str(link_root))
    # under /run, so that the DaemonSet's /host-var-run/ mount (the host's /var/run) holds this runtime's NRI socket
    base = tempfile.mkdtemp(prefix="krt", dir="/run")
    rt: containerd.Containerd | None = None
    client: CRIClient | None = None
    try:
        rt = containerd.Containerd(bin_dir, roots, runtime_images.pause, base=base)
        rt.start()
        start = time.monotonic()
        rt.import_image(runtime_images.pause_archive)
        rt.import_image(agent_image.archive)
        print(f"ctr images import: {time.monotonic() - start:.1f} s")
        client = CRIClient(rt.socket)
        kubelet = Kubelet(client, roots)
        kubelet.setup()
        res = container["resources"]
        pod = Pod(f"koordlet-{uuid.uuid4().hex[:5]}", str(uuid.uuid4()), namespace=ds["metadata"]["namespace"],
                  labels=ds["spec"]["template"]["metadata"]["labels"],
                  containers={container["name"]: Resources(
                      cpu_request=quantity_milli(res["requests"]["cpu"]),
                      cpu_limit=quantity_milli(res["limits"]["cpu"]),
                      memory_request=quantity_bytes(res["requests"]["memory"]),
                      memory_limit=quantity_bytes(res["limits"]["memory"]))},
                  host_pid=True, privileged=True)
        rp = kubelet.run_pod(pod, log_directory=str(logs))
        port = free_port()
        env = {e["name"]: NODE_NAME for e in container["env"]
               if e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "spec.nodeName"}
        assert env == {"NODE_NAME": NODE_NAME}, container["env"]
        env.update({"KOORDLET_STANDALONE": "true", "KOORDLET_ADDR": f":{port}",
                    "KOORDLET_RUNTIME_HOOKS_NRI_SOCKET_PATH": os.path.relpath(rt.nri_socket, "/run")})
        command = [*container["command"], *container["args"]]
        cid = kubelet.start_container(rp, container["name"], agent_image.ref, container["command"], env,
                                      args=container["args"], mounts=mounts(spec, container, scratch))
        yield Deployed(kubelet, rt, roots, rp, cid, port, logs, command)
    finally:
        if client is not None:
            client.close()
        try:
            if rt is not None:
                rt.close()
            else:
                shutil.rmtree(base, ignore_errors=True)
        finally:
            roots.cleanup()


@pytest.fixture(scope="module")
def ready(deployed: Deployed) -> Deployed:
    """The agent serving and ready: pods synced (from the cgroup tree) and one collection cycle done."""
    start = time.monotonic()
    deployed.wait(lambda: deployed.get("/healthz", timeout=2)[0] == 200, "/healthz on the host's network")
    deployed.wait(lambda: deployed.get("/readyz", timeout=2)[0] == 200, "/readyz")
    print(f"agent ready {time.monotonic() - start:.1f} s after StartContainer")
    return deployed


# ---- 1. the archive ---------------------------------------------------------------------------------------------

def test_the_archive_is_a_slim_root_owned_image_with_koordlet_as_entrypoint(agent_image):
    index = json.loads(_member(agent_image.archive, "index.json"))
    (desc,) = index["manifests"]
    assert desc["annotations"]["io.containerd.image.name"] == agent_image.ref
    manifest = json.loads(_blob(agent_image.archive, desc["digest"]))
    config = json.loads(_blob(agent_image.archive, manifest["config"]["digest"]))
    assert config["config"]["Entrypoint"] == ["koordlet"]
    env = dict(e.split("=", 1) for e in config["config"]["Env"])
    assert env["PATH"].split(":")[0] == "/opt/koordlet/bin"
    assert "9316/tcp" in config["config"]["ExposedPorts"]
    (layer,) = manifest["layers"]
    compressed, unpacked = os.path.getsize(agent_image.archive), 0
    names: dict[str, tarfile.TarInfo] = {}
    bad = []
    with tarfile.open(agent_image.archive) as archive:
        blob = archive.extractfile("blobs/sha256/" + layer["digest"].removeprefix("sha256:"))
        assert blob is not None
        with gzip.open(blob) as gz, tarfile.open(fileobj=gz, mode="r|") as tar:
            infos = list(tar)
    for info in infos:
        names[info.name] = info
        unpacked += info.size
        other_writable = info.mode & stat.S_IWOTH and not (info.isdir() and info.mode & stat.S_ISVTX)
        if info.uid != 0 or (other_writable and not info.issym()):
            bad.append(f"{info.name} uid={info.uid} mode={oct(info.mode)}")
    print(f"image {compressed / MI:.1f} MiB, {unpacked / MI:.1f} MiB unpacked, {len(names)} entries")
    assert bad == [], f"not root's, or writable by others: {bad[:20]}"
    assert names["koordlet"].issym() and names["koordlet"].linkname == "/opt/koordlet/bin/koordlet"
    assert names["opt/koordlet/bin/koordlet"].isreg()
    site = next(n for n in names if n.endswith("/site-packages") and n.startswith("opt/koordlet/lib/"))
    left = [n for n in names if n.startswith((f"{site}/pip/", f"{site}/kubernetes/aio/", f"{site}/aiohttp/",
                                              "usr/share/man/", "usr/share/info/", "var/lib/apt/lists/",
                                              "var/cache/apt/archives/", "dev/", "tmp/"))
            and not names[n].isdir()]
    assert left == [], left[:20]
    docs = [n for n in names if n.startswith("usr/share/doc/") and names[n].isreg()]
    assert docs and all(n.endswith("/copyright") for n in docs), [n for n in docs if not n.endswith("/copyright")]
    assert [n for n in names if n.startswith("usr/share/locale/") and names[n].isreg()] in (
        [], ["usr/share/locale/locale.alias"])
    assert "etc/resolv.conf" not in names and "etc/hostname" not in names     # this machine's; the runtime's


# ---- 2. from outside --------------------------------------------------------------------------------------------

def test_the_daemonset_pod_serves_metrics_on_the_host_network_from_the_host_pid_namespace(ready):
    status, text = ready.get("/metrics")
    assert status == 200
    assert "koordlet_start_time" in text and "koordlet_pods" in text
    _, info = ready.cri.container_status(ready.container_id)
    pid = int(info["pid"])
    for ns in ("pid", "net"):                             # hostPID, hostNetwork
        assert os.readlink(f"/proc/{pid}/ns/{ns}") == os.readlink(f"/proc/self/ns/{ns}")
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        argv = [a.decode() for a in f.read().split(b"\0") if a]
    assert argv[0] == "/opt/koordlet/bin/python" and argv[2:] == ready.command[1:], argv
    assert os.readlink(f"/proc/{pid}/root/koordlet") == "/opt/koordlet/bin/koordlet"
    with open(f"/proc/{pid}/cgroup") as f:                # in the pod cgroup the kubelet made
        assert f"/kubepods/burstable/pod{ready.pod.pod.uid}/{ready.container_id}" in f.read()
    # its own pod, found in the host's cgroup tree (the test root, through /host-cgroup/)
    ready.wait(lambda: (ready.metric("koordlet_pods") or 0) >= 1, "the agent to find its pod in /host-cgroup/")
    # the runtime's NRI socket, through /host-var-run/
    ready.wait(lambda: ready.metric("koordlet_nri_connected") == 1, "the NRI plugin to register with containerd")


# ---- 3. koordlet doctor inside ----------------------------------------------------------------------------------

def test_doctor_inside_the_container_sees_the_host(ready):
    rc, out, err = ready.exec("koordlet", "doctor")
    assert rc == 0, err[-3000:]
    print(out)
    rows = {line[:20].strip(): line[20:] for line in out.splitlines()[1:]}
    header = out.splitlines()[0]
    assert "cgroup-root=/host-cgroup/" in header and "sys-root=/host-sys/" in header, header
    assert rows["cgroup version"].split()[:2] == ["yes", "v1"], rows["cgroup version"]
    assert rows["cgroup driver"].split()[:2] == ["yes", "cgroupfs"], rows["cgroup driver"]
    assert rows["kubepods tree"].split()[0] == "yes", rows["kubepods tree"]
    for row in ("collection", "enforcement", "controller cpu", "controller memory", "controller cpuset"):
        assert rows[row].split()[0] == "yes", (row, rows[row])
    nri = [line for line in out.splitlines() if line.startswith("nri ")]
    assert nri and nri[0].split()[2:4] == ["on", "yes"], nri


# ---- 4. koordlet report --once inside ---------------------------------------------------------------------------

def test_report_once_inside_the_container_reports_this_machine(ready):
    rc, out, err = ready.exec("koordlet", "report", "--once", "--standalone", "-o", "json")
    assert rc == 0, err[-3000:]
    items = {item["kind"]: item for item in json.loads(out)["items"]}
    metric = items["NodeMetric"]
    assert metric["metadata"]["name"] == NODE_NAME
    memory = metric["status"]["nodeMetric"]["nodeUsage"]["resources"]["memory"]
    assert quantity_bytes(memory) > 0, memory
    pods = [p for p in metric["status"]["podsMetric"] if ready.pod.pod.uid in json.dumps(p)]
    assert pods, f"its own pod is not in the report: {metric['status']['podsMetric']}"
    nrt = items["NodeResourceTopology"]
    assert nrt["metadata"]["name"] == NODE_NAME
    with open("/sys/devices/system/cpu/online") as f:
        online = set(parse_cpu_list(f.read().strip()))
    topology = json.loads(nrt["metadata"]["annotations"]["node.koordinator.sh/cpu-topology"])
    assert {cpu["id"] for cpu in topology["detail"]} == online           # this machine's CPUs, from /host-sys/
    capacity = sum(int(r["capacity"]) for zone in nrt["zones"] for r in zone["resources"] if r["name"] == "cpu")
    assert capacity == len(online), nrt["zones"]
