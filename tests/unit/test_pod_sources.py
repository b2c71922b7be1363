"""Pod sources against real HTTP(S) doubles: kubelet client and API-server lister."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any, Protocol, TypeVar

import pytest

from doubles.apiserver_double import ApiServerDouble, Request, status_object, write_kubeconfig
from doubles.kubelet_double import KubeletDouble, TlsFiles, make_self_signed_cert, openssl_available
from koordlet.states.apiserver import ApiServerPodSource
from koordlet.states.kubeapi import ApiError, ConfigError, KubeApi
from koordlet.states.kubelet import KubeletClient, KubeletError
from tests.builders import pod_object

REPO_ROOT = Path(__file__).resolve().parents[2]


class Closable(Protocol):
    def close(self) -> None: ...


C = TypeVar("C", bound=Closable)
Closing = Callable[[C], C]


# a pod in wire format, with the camelCase keys both sources must preserve (the container id, scheme included, as
# given)
pod = partial(pod_object, spec_containers=[{"name": "main", "image": "busybox"}], created="2024-01-01T00:00:00Z",
              container_status={"ready": True, "restartCount": 0}, labels_key=False)


def free_port() -> int:
    """A port nothing listens on (bound then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def closing() -> Iterator[Closing[Any]]:
    """Close every client a test opens, so no socket outlives its test."""
    opened: list[Closable] = []

    def track(client: C) -> C:
        opened.append(client)
        return client

    yield track
    for client in opened:
        client.close()


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    if not openssl_available():
        pytest.skip("openssl CLI not available")
    return make_self_signed_cert(tmp_path_factory.mktemp("tls"))


@pytest.fixture
def kubelet() -> Iterator[KubeletDouble]:
    with KubeletDouble() as double:
        double.pods = [pod("uid-web-0", "web-0", namespace="default", node="node-a",
                           containers={"main": "containerd://aaa"})]
        yield double


@pytest.fixture
def http_client(closing: Closing[KubeletClient]) -> Callable[..., KubeletClient]:
    """Read-only-port style client factory: plain HTTP, no token."""

    def make(double: KubeletDouble, timeout: float = 2.0) -> KubeletClient:
        return closing(KubeletClient("127.0.0.1", double.port, https=False, token_path=None, timeout=timeout))

    return make


# --- kubelet -----------------------------------------------------------------


def test_read_only_port_returns_raw_pods_without_auth(kubelet: KubeletDouble, http_client: Any) -> None:
    pods = http_client(kubelet).get_pods()
    assert pods == kubelet.pods
    assert pods[0]["status"]["containerStatuses"][0]["containerID"] == "containerd://aaa"
    assert [r.path for r in kubelet.requests] == ["/pods/"]
    assert "authorization" not in kubelet.requests[0].headers


def test_empty_kubelet_pod_list_encoded_as_null_is_empty(kubelet: KubeletDouble, http_client: Any) -> None:
    kubelet.raw_body = b'{"kind":"PodList","apiVersion":"v1","metadata":{},"items":null}'
    assert http_client(kubelet).get_pods() == []


def test_https_sends_bearer_token_and_picks_up_rotation(tls: TlsFiles, tmp_path: Path, closing: Closing[Any]) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("tok-1\n")
    with KubeletDouble(tls=tls, required_token="tok-1") as double:
        double.pods = [pod("uid-web-0", "web-0", namespace="default", node="node-a",
                           containers={"main": "containerd://aaa"})]
        client = closing(KubeletClient("127.0.0.1", double.port, https=True, token_path=str(token_file), timeout=2.0))
        assert client.get_pods() == double.pods
        assert double.requests[-1].headers["authorization"] == "Bearer tok-1"

        # Rotation: new content and a new mtime must be picked up.
        token_file.write_text("tok-2\n")
        stat = token_file.stat()
        os.utime(token_file, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
        double.required_token = "tok-2"
        assert client.get_pods() == double.pods
        assert double.requests[-1].headers["authorization"] == "Bearer tok-2"


def test_token_file_is_not_reread_while_unchanged(tls: TlsFiles, tmp_path: Path, closing: Closing[Any]) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("tok-1")
    with KubeletDouble(tls=tls) as double:
        client = closing(KubeletClient("127.0.0.1", double.port, https=True, token_path=str(token_file), timeout=2.0))
        client.get_pods()
        # Same inode, size and mtime: the cached token must still be used.
        stat = token_file.stat()
        token_file.write_text("tok-X")
        os.utime(token_file, ns=(stat.st_atime_ns, stat.st_mtime_ns))
        client.get_pods()
    assert [r.headers["authorization"] for r in double.requests] == ["Bearer tok-1", "Bearer tok-1"]


def test_https_without_token_is_rejected_with_401(tls: TlsFiles, closing: Closing[Any]) -> None:
    with KubeletDouble(tls=tls, required_token="tok-1") as double:
        client = closing(KubeletClient("127.0.0.1", double.port, https=True, token_path=None, timeout=2.0))
        with pytest.raises(KubeletError, match=r"HTTP 401: 'Unauthorized'"):
            client.get_pods()


def test_missing_token_file_names_the_path(tmp_path: Path, kubelet: KubeletDouble) -> None:
    missing = tmp_path / "no-such-token"
    client = KubeletClient("127.0.0.1", kubelet.port, https=False, token_path=str(missing), timeout=2.0)
    with pytest.raises(KubeletError, match=f"cannot read token file {missing}"):
        client.get_pods()
    assert kubelet.requests == []


def test_ca_file_enables_certificate_verification(tls: TlsFiles, tmp_path: Path, closing: Closing[Any]) -> None:
    other_ca = make_self_signed_cert(tmp_path, name="other")
    with KubeletDouble(tls=tls) as double:
        trusted = closing(
            KubeletClient("127.0.0.1", double.port, https=True, token_path=None, timeout=2.0, ca_file=tls.cert)
        )
        assert trusted.get_pods() == []
        untrusted = KubeletClient(
            "127.0.0.1", double.port, https=True, token_path=None, timeout=2.0, ca_file=other_ca.cert
        )
        with pytest.raises(KubeletError, match="TLS certificate verification failed"):
            untrusted.get_pods()


def test_http_500_names_url_status_and_body_prefix(kubelet: KubeletDouble, http_client: Any) -> None:
    kubelet.error_status = 500
    kubelet.error_body = b"boom " + b"x" * 300 + b"TAIL"
    with pytest.raises(KubeletError) as excinfo:
        http_client(kubelet).get_pods()
    message = str(excinfo.value)
    assert f"http://127.0.0.1:{kubelet.port}/pods/" in message
    assert "HTTP 500" in message and "boom" in message
    assert "TAIL" not in message  # only the first 200 bytes of the body


def test_garbage_json_is_an_error(kubelet: KubeletDouble, http_client: Any) -> None:
    kubelet.raw_body = b"{not json"
    with pytest.raises(KubeletError, match="bad JSON"):
        http_client(kubelet).get_pods()


@pytest.mark.parametrize(
    "body", [b'{"kind":"Status","status":"Failure"}', b"[1, 2]", b'{"kubeletconfig":{}}',
             b'{"kind":"PodList","items":[1]}']
)
def test_json_that_is_not_a_pod_list_is_an_error(kubelet: KubeletDouble, http_client: Any, body: bytes) -> None:
    kubelet.raw_body = body
    with pytest.raises(KubeletError, match="PodList"):
        http_client(kubelet).get_pods()


def test_stall_times_out_and_next_call_reconnects(kubelet: KubeletDouble, http_client: Any) -> None:
    kubelet.stall_seconds = 5.0
    client = http_client(kubelet, timeout=0.3)
    started = time.monotonic()
    with pytest.raises(KubeletError, match=r"timed out after 0\.3s"):
        client.get_pods()
    assert time.monotonic() - started < 1.5

    kubelet.stall_seconds = 0.0
    assert client.get_pods() == kubelet.pods
    assert kubelet.connections == 2


def test_connection_refused_is_an_error() -> None:
    port = free_port()
    client = KubeletClient("127.0.0.1", port, https=False, token_path=None, timeout=2.0)
    with pytest.raises(KubeletError, match=f"http://127.0.0.1:{port}/pods/ failed: connection refused"):
        client.get_pods()


def test_connection_is_reused_across_calls(kubelet: KubeletDouble, http_client: Any) -> None:
    client = http_client(kubelet)
    for _ in range(3):
        client.get_pods()
    assert len(kubelet.requests) == 3
    assert kubelet.connections == 1


def test_stale_connection_is_replaced_transparently(kubelet: KubeletDouble, http_client: Any) -> None:
    client = http_client(kubelet)
    client.get_pods()
    kubelet.drop_connections()
    assert client.get_pods() == kubelet.pods
    assert kubelet.connections == 2


def test_get_configz(kubelet: KubeletDouble, http_client: Any) -> None:
    kubelet.configz = {"kubeletconfig": {"cpuManagerPolicy": "static"}}
    assert http_client(kubelet).get_configz() == {"kubeletconfig": {"cpuManagerPolicy": "static"}}
    assert kubelet.requests[-1].path == "/configz"


# --- API server ----------------------------------------------------------------


@pytest.fixture
def apiserver() -> Iterator[ApiServerDouble]:
    with ApiServerDouble() as double:
        double.add_pod(pod("uid-web-0", "web-0", namespace="default", node="node-a",
                           containers={"main": "containerd://aaa"}))
        double.add_pod(pod("uid-db-0", "db-0", namespace="prod", node="node-a",
                           containers={"main": "containerd://bbb"}))
        double.add_pod(pod("uid-web-1", "web-1", namespace="default", node="node-b",
                           containers={"main": "containerd://ccc"}))
        yield double


@pytest.fixture
def pod_source(tmp_path: Path, closing: Closing[KubeApi]) -> Callable[..., ApiServerPodSource]:
    """Factory for a source whose kubeconfig points at ``server``."""

    def make(server: str, node: str = "node-a") -> ApiServerPodSource:
        kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", server)
        return ApiServerPodSource(closing(KubeApi(kubeconfig, timeout=2.0)), node)

    return make


def test_apiserver_lists_only_this_nodes_pods(apiserver: ApiServerDouble, pod_source: Any) -> None:
    pods = pod_source(apiserver.url).list_pods()
    assert sorted(p["metadata"]["name"] for p in pods) == ["db-0", "web-0"]
    request = apiserver.requests[-1]
    assert request.path == "/api/v1/pods"
    assert request.query["fieldSelector"] == ["spec.nodeName=node-a"]
    assert request.headers["user-agent"] == "koordlet-py"


def test_apiserver_returns_raw_camel_case_json(apiserver: ApiServerDouble, pod_source: Any) -> None:
    [pod] = pod_source(apiserver.url, node="node-b").list_pods()
    assert pod["status"]["containerStatuses"][0]["containerID"] == "containerd://ccc"
    assert pod["spec"]["nodeName"] == "node-b"
    # Strings, not datetime objects: no model deserialisation happened.
    assert pod["metadata"]["creationTimestamp"] == "2024-01-01T00:00:00Z"


def test_apiserver_http_error_carries_status_and_message(apiserver: ApiServerDouble, pod_source: Any) -> None:
    def forbidden(request: Request) -> tuple[int, dict[str, Any]]:
        return 403, status_object(403, "Forbidden", "pods is forbidden: cannot list resource")

    apiserver.route("GET", r"/api/v1/pods", forbidden)
    with pytest.raises(ApiError, match=r"HTTP 403 .*pods is forbidden"):
        pod_source(apiserver.url).list_pods()


def test_apiserver_unknown_path_is_a_404_status(apiserver: ApiServerDouble, pod_source: Any) -> None:
    with pytest.raises(ApiError, match=r"HTTP 404 .*NotFound"):
        pod_source(apiserver.url + "/nope").list_pods()


def test_apiserver_connection_refused_is_an_error(pod_source: Any) -> None:
    with pytest.raises(ApiError, match="refused"):
        pod_source(f"http://127.0.0.1:{free_port()}").list_pods()


def test_apiserver_bad_config_is_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match="cannot load kubeconfig"):
        KubeApi(str(tmp_path / "missing"), timeout=2.0)
    malformed = tmp_path / "malformed"
    malformed.write_text("just a string\n")
    with pytest.raises(ConfigError, match=f"cannot load kubeconfig {malformed}"):
        KubeApi(str(malformed), timeout=2.0)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(ConfigError, match="cannot load in-cluster config"):
        KubeApi(None, timeout=2.0)


def test_importing_apiserver_module_does_not_import_kubernetes() -> None:
    code = "import koordlet.states.apiserver, sys; assert 'kubernetes' not in sys.modules"
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
