import logging
import os
import time

import yaml

from koordlet.host.cgroup import Cgroups, CgroupVersion, Driver, KubeQOS
from koordlet.states.standalone import StandalonePodSource, load_pods_file
from tests.builders import pod_object
from tests.fakehost import CgroupValues, FakeHost

A, B = "a" * 64, "b" * 64


def test_discovery_without_pods_file(tmp_path):
    host = FakeHost(str(tmp_path), CgroupVersion.V2, Driver.SYSTEMD)
    host.add_pod(KubeQOS.BESTEFFORT, "uid-1", containers={A: CgroupValues()})
    metas = StandalonePodSource(Cgroups.detect(host.paths))()
    (meta,) = metas
    assert meta.pod.uid == "uid-1" and meta.pod.kube_qos is KubeQOS.BESTEFFORT
    assert meta.pod.qos_class == "BE"
    assert meta.cgroup_dir == host.pod_dir(KubeQOS.BESTEFFORT, "uid-1")
    ((container, rel),) = meta.containers
    assert container.id == A and container.runtime == "containerd"
    assert rel == host.container_dir(KubeQOS.BESTEFFORT, "uid-1", A)


def test_pods_file_names_pods_and_containers(tmp_path):
    host = FakeHost(str(tmp_path / "h"))
    host.add_pod(KubeQOS.BURSTABLE, "uid-1", containers={A: CgroupValues(), B: CgroupValues()})
    f = tmp_path / "pods.yaml"
    f.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [
        pod_object("uid-1", "web", namespace="shop", containers={"app": A},
                   labels={"koordinator.sh/qosClass": "LS"}),
        pod_object("uid-9", "elsewhere")]}))
    (meta,) = StandalonePodSource(Cgroups.detect(host.paths), str(f))()
    assert meta.pod.key == "shop/web" and meta.pod.raw_qos_class == "LS"
    names = sorted(c.name for c, _ in meta.containers)
    assert names == ["app", B[:12]]                      # unknown container keeps a short id as name


def test_malformed_pods_file_entries_are_skipped_with_clear_errors(tmp_path, caplog):
    f = tmp_path / "pods.yaml"
    f.write_text(yaml.safe_dump([pod_object("uid-1", "good"), {"metadata": {"name": "nouid"}}, "junk",
                                 pod_object("uid-1", "dup"), {"metadata": [1, 2], "spec": {}}]))
    pods, errors = load_pods_file(str(f))
    assert list(pods) == ["uid-1"] and pods["uid-1"].name == "good"
    assert any("entry 1" in e and "pod uid" in e for e in errors)
    assert any("entry 2" in e and "expected a Pod object" in e for e in errors)
    assert any("entry 3" in e and "duplicate uid" in e for e in errors)
    assert any("entry 4" in e and "metadata is not a mapping" in e for e in errors)    # only that entry lost


def test_unparseable_file_keeps_previous_content_and_reload(tmp_path, caplog):
    host = FakeHost(str(tmp_path / "h"))
    host.add_pod(KubeQOS.GUARANTEED, "uid-1", containers={A: CgroupValues()})
    f = tmp_path / "pods.yaml"
    f.write_text(yaml.safe_dump([pod_object("uid-1", "v1-name")]))
    src = StandalonePodSource(Cgroups.detect(host.paths), str(f))
    assert src()[0].pod.name == "v1-name"
    f.write_text("- {unclosed: [\n")
    os.utime(f, (time.time() + 5, time.time() + 5))
    with caplog.at_level(logging.ERROR):
        assert src()[0].pod.name == "v1-name"
    assert "not valid YAML" in caplog.text and str(f) in caplog.text
    f.write_text(yaml.safe_dump([pod_object("uid-1", "v2-name")]))
    os.utime(f, (time.time() + 10, time.time() + 10))
    assert src()[0].pod.name == "v2-name"
