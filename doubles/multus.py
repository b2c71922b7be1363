"""What Multus-CNI does with a PodResources socket, per CNI ADD (multus-cni ``pkg/kubeletclient/kubeletclient.go``:
``GetResourceClient``, ``kubeletClient.GetPodResourceMap``).

A new connection each time, 10 s timeout, 16 MiB receive limit, the ``:authority`` grpc-go sends for a raw unix
path (the socket path itself), ``List`` only; then the devices of every container of the pod merged into one map
resource name -> ids, each id list sorted as strings, as recent Multus versions do.
"""

from __future__ import annotations

import grpc

from koordlet._proto.podresources import api_pb2 as pb
from koordlet._proto.podresources import api_pb2_grpc as pb_grpc

MAX_RECV = 16 * 2**20


def list_pods(socket_path: str, timeout: float = 10.0) -> pb.ListPodResourcesResponse:
    options = [("grpc.max_receive_message_length", MAX_RECV), ("grpc.default_authority", socket_path)]
    with grpc.insecure_channel(f"unix://{socket_path}", options=options) as channel:
        return pb_grpc.PodResourcesListerStub(channel).List(pb.ListPodResourcesRequest(), timeout=timeout)


def resource_map(response: pb.ListPodResourcesResponse, namespace: str, name: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for pod in response.pod_resources:
        if pod.namespace != namespace or pod.name != name:
            continue
        for container in pod.containers:
            for devices in container.devices:
                out.setdefault(devices.resource_name, []).extend(devices.device_ids)
    return {k: sorted(v) for k, v in out.items()}


def device_ids_for(socket_path: str, namespace: str, name: str, resource: str) -> list[str]:
    """The ids Multus would hand to the networks whose NetworkAttachmentDefinition names ``resource``."""
    return resource_map(list_pods(socket_path), namespace, name).get(resource, [])
