import json
import logging
import os
import sys
from pathlib import Path

import pytest
import yaml

from doubles import fakenvml
from doubles.crdschema import CrdSchemas
from doubles.kubelet_double import KubeletDouble
from koordlet.agent import kubelet_client, pod_source
from koordlet.cli import component_support, main
from koordlet.host import probes
from koordlet.host.cgroup import Cgroups, CgroupVersion, Driver, KubeQOS
from koordlet.host.probes import probe
from koordlet.ops.config import build
from koordlet.states.informer import PodsInformer, TokenBucket
from tests.builders import host_paths, pod_object
from tests.fakehost import CgroupValues, FakeHost

A, B = "a" * 64, "b" * 64
REPO_ROOT = Path(__file__).resolve().parents[2]


def kubelet_informer(port: int) -> PodsInformer:
    cfg = build(environ={"NODE_NAME": "n1"}, flags={"kubelet-insecure-tls": True, "kubelet-read-only-port": port,
                                                     "cgroup-driver": "systemd"})
    cgroups = Cgroups("/nonexistent", CgroupVersion.V2, Driver.SYSTEMD)
    return PodsInformer(pod_source(cfg, cgroups, kubelet_client(cfg), None), 10.0, "kubelet")


def test_kubelet_source_maps_cgroups_and_survives_outage(caplog):
    with KubeletDouble() as kubelet:
        kubelet.pods = [pod_object("u-1", "web", containers={"app": A}, qos="Guaranteed"),
                        pod_object("u-2", "bad", containers={"app": B})]
        kubelet.pods[1]["status"]["containerStatuses"][0]["containerID"] = "containerd://../.."
        informer = kubelet_informer(kubelet.port)
        with caplog.at_level(logging.WARNING):
            assert informer.sync()
        (meta,) = informer.pods                       # the malformed pod is skipped, the good one kept
        assert meta.cgroup_dir == "kubepods.slice/kubepods-podu_1.slice"
        assert meta.containers[0][1] == f"kubepods.slice/kubepods-podu_1.slice/cri-containerd-{A}.scope"
        assert "pod default/bad" in caplog.text and "container id" in caplog.text
        caplog.clear()
        informer.sync()
        assert "pod default/bad" not in caplog.text   # logged once, not every sync

        kubelet.error_status = 500
        with caplog.at_level(logging.WARNING):
            assert not informer.sync()
            assert not informer.sync()
        assert [m.pod.uid for m in informer.pods] == ["u-1"]     # last good answer kept
        assert caplog.text.count("pod sync failed") == 1
        kubelet.error_status = None
        with caplog.at_level(logging.INFO):
            assert informer.sync()
        assert "pod sync recovered" in caplog.text


def test_a_sync_keeps_the_meta_of_an_unchanged_pod():
    """Each sync parses every pod again; an unchanged pod keeps its meta object (what strategies memoize per
    meta stays), a changed one gets the new meta."""
    with KubeletDouble() as kubelet:
        kubelet.pods = [pod_object("u-1", "web", containers={"app": A}), pod_object("u-2", "db", containers={"app": B})]
        informer = kubelet_informer(kubelet.port)
        assert informer.sync()
        db, web = informer.pods                       # sorted by namespace and name
        kubelet.pods[1]["metadata"]["labels"] = {"tier": "data"}
        assert informer.sync()
        db_again, web_again = informer.pods
        assert web_again is web
        assert db_again is not db and db_again.pod.labels == {"tier": "data"}


def test_token_bucket():
    now = [0.0]
    bucket = TokenBucket(rate=5.0, burst=2, clock=lambda: now[0])
    assert bucket.delay() == 0 and bucket.delay() == 0
    assert bucket.delay() > 0.19                        # burst spent: wait ~1/rate
    now[0] += 0.2
    assert bucket.delay() == 0


def fake_host_flags(host: FakeHost) -> list[str]:
    return ["--cgroup-root-dir", host.paths.cgroup_root, "--proc-root-dir", host.paths.proc_root,
            "--sys-root-dir", host.paths.sys_root, "--sys-fs-root-dir", host.paths.sys_fs_root]


def test_run_once_prints_a_summary(tmp_path, capsys):
    host = FakeHost(str(tmp_path / "h"), CgroupVersion.V1, Driver.CGROUPFS)
    host.add_pod(KubeQOS.BURSTABLE, "u-1", CgroupValues(anon=64 << 20), {A: CgroupValues()})
    pods = tmp_path / "pods.yaml"
    pods.write_text(yaml.safe_dump([pod_object("u-1", "web", namespace="shop", containers={"app": A})]))
    rc = main(["run", "--once", "--standalone", "--collect-res-used-interval", "0.2", "--pods-file", str(pods)]
              + fake_host_flags(host))
    out = capsys.readouterr().out
    assert rc == 0
    assert "shop/web" in out and "LS" in out and "64.0" in out      # pod row with its memory in MiB
    assert "node" in out and "cgroup=v1/cgroupfs" in out


def test_doctor_on_a_v2_tree(tmp_path, capsys):
    host = FakeHost(str(tmp_path / "h"), CgroupVersion.V2, Driver.SYSTEMD)
    open(host.paths.cgroup_root + "/cpu.max.burst", "w").close()
    cgroups = Cgroups.detect(host.paths)
    features = {f.name: f for f in probe(host.paths, cgroups)}
    assert features["cgroup version"].detail.startswith("v2")
    assert features["kubepods tree"].supported
    assert features["controller memory"].supported and features["controller io"].supported
    assert probes.cpu_burst(host.paths, cgroups)[0]
    assert not probes.cpu_idle(host.paths, cgroups)[0]
    # the component lines: each registered strategy/collector says whether this host supports it, and why not
    config = build(environ={}, flags={"standalone": True, "node-name": "n"})
    support = {name: (ok, why) for name, _, _, ok, why in component_support(config, host.paths, cgroups)}
    assert support["cpu-burst"][0]
    assert not support["resctrl"][0] and support["resctrl"][1]
    assert support["coldpage"] == (False, "kidled is cgroup v1 only")
    assert set(support) >= {"pod-resources", "usage", "nodemetric", "nri"}
    assert main(["doctor"] + fake_host_flags(host)) == 0
    out = capsys.readouterr().out
    assert "FEATURE" in out and "COMPONENT" in out
    (resctrl,) = [line for line in out.splitlines() if line.startswith("resctrl ")]
    assert resctrl.split()[1:4] == ["strategy", "on", "no"]


def test_doctor_reports_for_the_profile_that_will_run(tmp_path, monkeypatch, capsys):
    """Outside a cluster doctor shows the standalone profile, what `make run` runs (the files report, the GPU
    collector, no report for an API server); in a cluster, or asked, the cluster profile; it says which and why."""
    monkeypatch.setitem(sys.modules, "pynvml", fakenvml.absent())
    monkeypatch.setenv("STATE_DIRECTORY", str(tmp_path / "state"))
    host = FakeHost(str(tmp_path / "h"), CgroupVersion.V2, Driver.SYSTEMD)
    token = tmp_path / "token"

    def doctor(*args: str) -> tuple[str, dict[str, list[str]]]:
        assert main(["doctor", "--kubelet-token-file", str(token), *args] + fake_host_flags(host)) == 0
        lines = capsys.readouterr().out.splitlines()
        start = lines.index(next(line for line in lines if line.startswith("COMPONENT")))
        return lines[1], {line.split()[0]: line.split(None, 4)[1:] for line in lines[start + 1:]}

    profile, rows = doctor()                       # no token file: not a node of a cluster
    assert profile == (f"profile: standalone, as `make run` runs the agent: the kubelet token file {token} does not "
                       "exist (not in a pod of a cluster); --standalone=false shows the cluster profile")
    assert rows["files"][:2] == ["report", "on"] and rows["gpu"][:3] == ["collector", "on", "no"]
    for report in ("nodemetric", "noderesourcetopology", "device"):
        assert rows[report] == ["report", "off", "yes",
                                "standalone: no API server; the files report writes its object into report-dir"]
    assert doctor("--standalone")[0].startswith("profile: standalone (as `make run`")
    assert doctor("--standalone")[1] == rows

    cluster = "profile: cluster (pods from the kubelet, reports to the API server); --standalone shows what"
    profile, asked = doctor("--standalone=false")
    assert profile.startswith(cluster)
    assert asked["files"][:2] == ["report", "off"] and asked["gpu"][:2] == ["collector", "off"]
    assert asked["nodemetric"] == ["report", "on", "yes", "-"] and asked["device"][:2] == ["report", "off"]
    token.write_text("t")                          # a pod of a cluster
    assert doctor() == (profile, asked)


def test_topology_command_on_this_host(capsys):
    assert main(["topology", "--output", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["summary"]["onlineCPUs"] == os.cpu_count()
    assert data["summary"]["numaNodes"] >= 1


def test_report_once_prints_node_metric(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fakenvml.absent())      # no GPU here, whatever the test machine has
    host = FakeHost(str(tmp_path / "h"), CgroupVersion.V2, Driver.SYSTEMD)
    host.add_pod(KubeQOS.BESTEFFORT, "u-1", CgroupValues(anon=32 << 20), {A: CgroupValues()})
    pods = tmp_path / "pods.yaml"
    pods.write_text(yaml.safe_dump([pod_object("u-1", "batch", namespace="jobs", qos="BestEffort",
                                               containers={"job": A})]))
    rc = main(["report", "--once", "--output", "json", "--standalone", "--collect-res-used-interval", "0.2",
               "--pods-file", str(pods)] + fake_host_flags(host))
    assert rc == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed["kind"] == "List"
    obj, topology, device = listed["items"]     # standalone reports devices (Accelerators on in its profile)
    assert obj["apiVersion"] == "slo.koordinator.sh/v1alpha1" and obj["kind"] == "NodeMetric"
    assert topology["apiVersion"] == "topology.node.k8s.io/v1alpha1" and topology["kind"] == "NodeResourceTopology"
    assert device["apiVersion"] == "scheduling.koordinator.sh/v1alpha1" and device["kind"] == "Device"
    assert device["spec"] == {} and "labels" not in device["metadata"]      # no GPU, no RDMA: an empty list
    schemas = CrdSchemas.load(REPO_ROOT / "deploy" / "crds")
    assert schemas.validate(obj) == [] and schemas.validate(topology) == [] and schemas.validate(device) == []
    (pod,) = obj["status"]["podsMetric"]
    assert (pod["namespace"], pod["name"], pod["qos"], pod["priority"]) == ("jobs", "batch", "BE", "koord-batch")
    assert pod["podUsage"]["resources"] == {"cpu": "0", "memory": "32Mi"}   # fake counters do not move


def test_standalone_sink_writes_atomically(tmp_path, monkeypatch):
    from koordlet.agent import Agent
    monkeypatch.setitem(sys.modules, "pynvml", fakenvml.absent())
    host = FakeHost(str(tmp_path / "h"), CgroupVersion.V1, Driver.CGROUPFS)
    cfg = build(environ={}, flags={"standalone": True, "report-dir": str(tmp_path / "reports"),
                                   "cgroup-root-dir": host.paths.cgroup_root, "proc-root-dir": host.paths.proc_root},
                hostname=lambda: "n9")
    agent = Agent.build(cfg, persist=False)
    agent.informer.sync()
    agent.collect_once()
    agent.write_reports()
    first = yaml.safe_load((tmp_path / "reports" / "nodemetric.yaml").read_text())
    assert first["status"]["nodeMetric"]["nodeUsage"] == {}     # one cycle: no CPU rate yet, nothing to report
    agent.collect_once()
    agent.write_reports()
    written = yaml.safe_load((tmp_path / "reports" / "nodemetric.yaml").read_text())
    assert written["metadata"] == {"name": "n9"}
    assert written["status"]["nodeMetric"]["nodeUsage"]["resources"]["memory"] == "4Gi"  # fake meminfo: 16-12 GiB
    # no temp files left
    assert sorted(p.name for p in (tmp_path / "reports").iterdir()) == [
        "device.yaml", "nodemetric.yaml", "noderesourcetopology.yaml"]


def test_report_files_hold_what_pyyamls_safe_dump_writes(tmp_path):
    """The sink's emitter (libyaml's when PyYAML has it) writes the text yaml.safe_dump does for a report's kind
    of content: nested maps and lists, quantities, long annotation JSON, multi-line text."""
    from koordlet.reporters.files import write_yaml_atomic
    obj = {"metadata": {"name": "n1", "annotations": {"node.koordinator.sh/cpu-topology": json.dumps(
               {"detail": [{"id": i, "core": i // 2, "socket": 0, "node": 0} for i in range(64)]})}},
           "status": {"podsMetric": [{"name": f"p{i}", "podUsage": {"resources": {"cpu": "125m", "memory": "1Gi"}}}
                                     for i in range(3)], "empty": {}, "none": None, "yes": "yes", "num": "0x1F",
                      "text": "line one\nline two\n", "float": 0.25, "flag": True}}
    path = write_yaml_atomic(str(tmp_path), "r.yaml", obj)
    with open(path) as f:
        assert f.read() == yaml.safe_dump(obj, sort_keys=False, default_flow_style=False)


def test_doctor_on_this_host_names_why_bvt_and_core_sched_are_missing():
    """This VM (like CI) has a mainline kernel: no group identity, no core scheduling; doctor must say why."""
    paths = host_paths()
    if os.path.exists("/proc/sys/kernel/sched_group_identity_enabled"):
        pytest.skip("an Anolis kernel: group identity is supported here")
    cgroups = Cgroups.detect(paths)
    _, gi = probes.group_identity(paths, cgroups)
    assert "Anolis" in gi and "missing" in gi
    core, why = probes.core_sched(paths, cgroups)
    if core:
        pytest.skip("this kernel has core scheduling")
    assert "PR_SCHED_CORE" in why and any(w in why for w in ("CONFIG_SCHED_CORE", "SMT", "EPERM"))
