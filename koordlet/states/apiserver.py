"""API-server pod source: the alternative to polling the kubelet.

Lists the node's pods with the field selector ``spec.nodeName=<node>``, as
upstream koordlet does when it reads pods from the API server. The
``kubernetes`` client library is imported lazily inside
:class:`ApiServerPodSource` because importing it costs ~40 MB of memory, which a
node agent configured for the kubelet source should never pay.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

if TYPE_CHECKING:
    from kubernetes.client import CoreV1Api

log = logging.getLogger("koordlet.states.apiserver")

USER_AGENT = "koordlet-py"

# Enough of an error body to show the API server's Status message.
_BODY_SNIPPET_CHARS = 200


class ApiServerError(Exception):
    """Configuring the client or listing pods failed; the message says why."""


class ApiServerPodSource:
    """Lists this node's pods from the kube-apiserver as raw wire-format dicts.

    ``kubernetes`` is imported here, not at module level, so only a node
    configured for this source pays for it. The response is JSON-decoded
    directly (``_preload_content=False``) instead of being deserialised into
    ``V1Pod`` models: keys stay camelCase exactly as the kubelet source returns
    them, and it skips the library's costly model construction.
    """

    def __init__(self, node_name: str, kubeconfig: str | None, timeout: float) -> None:
        from kubernetes import client, config

        self._node_name = node_name
        self._timeout = timeout
        configuration = client.Configuration()
        # The except is broad on purpose: on a malformed kubeconfig the library
        # leaks YAMLError, TypeError, KeyError... -- all mean "bad config" here.
        try:
            if kubeconfig is not None:
                config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
            else:
                config.load_incluster_config(client_configuration=configuration)
        except Exception as exc:
            source = f"kubeconfig {kubeconfig}" if kubeconfig is not None else "in-cluster config"
            raise ApiServerError(f"cannot load {source}: {exc}") from exc
        # The caller's poll loop is the retry policy; urllib3's default of 3
        # retries would silently stretch one timed-out poll to 4x the timeout.
        configuration.retries = 0
        self._selector = f"spec.nodeName={node_name}"
        self._url = f"{configuration.host}/api/v1/pods?fieldSelector={quote(self._selector)}"
        api_client = client.ApiClient(configuration)
        api_client.user_agent = USER_AGENT
        self._api: CoreV1Api = client.CoreV1Api(api_client)

    def list_pods(self) -> list[dict[str, Any]]:
        """Return the node's pods as raw dicts with Kubernetes JSON keys."""
        import urllib3
        from kubernetes.client.exceptions import ApiException

        try:
            response = self._api.list_pod_for_all_namespaces(
                field_selector=self._selector,
                _preload_content=False,
                _request_timeout=self._timeout,
            )
            try:
                body = response.data
            finally:
                response.release_conn()
        except ApiException as exc:
            if exc.status:
                text = (exc.body or "")[:_BODY_SNIPPET_CHARS]
                raise self._failure(f"HTTP {exc.status} {exc.reason}: {text!r}") from exc
            # status 0: the library wraps TLS failures this way.
            raise self._failure(str(exc.reason)) from exc
        except urllib3.exceptions.HTTPError as exc:
            # MaxRetryError hides the real cause (refused, timed out) in .reason.
            cause = getattr(exc, "reason", None) or exc
            raise self._failure(f"{type(cause).__name__}: {cause}") from exc
        try:
            doc = json.loads(body)
        except ValueError as exc:
            raise self._failure(f"bad JSON ({exc}): {body[:_BODY_SNIPPET_CHARS]!r}") from exc
        if not isinstance(doc, dict) or doc.get("kind") != "PodList":
            raise self._failure(f"response is not a PodList: {json.dumps(doc)[:_BODY_SNIPPET_CHARS]}")
        items = doc.get("items") or []
        if not isinstance(items, list) or not all(isinstance(item, dict) for item in items):
            raise self._failure(f"PodList items is not a list of objects: {json.dumps(items)[:_BODY_SNIPPET_CHARS]}")
        return items

    def close(self) -> None:
        """Release the client's pooled connections."""
        self._api.api_client.close()

    def _failure(self, cause: str) -> ApiServerError:
        # debug only: the informer logs a failing source once, not on every poll
        log.debug("apiserver list pods failed url=%s node=%s error=%s", self._url, self._node_name, cause)
        return ApiServerError(f"apiserver list pods {self._url} failed: {cause}")
