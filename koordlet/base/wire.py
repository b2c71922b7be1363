"""Names that travel on the wire (labels, annotations, resource names, enum values), spelled as upstream.

Kept in one module so a typo cannot hide in a feature module. Upstream defines them in koordinator ``apis/extension/``
(qos.go, priority.go, resource.go, device_share.go, numa_aware.go, ...), ``apis/slo/v1alpha1/`` and
``apis/scheduling/v1alpha1/``.
"""

from __future__ import annotations

# Koordinator QoS classes (label koordinator.sh/qosClass) and priority classes.
LABEL_QOS_CLASS = "koordinator.sh/qosClass"
QOS_LSE, QOS_LSR, QOS_LS, QOS_BE, QOS_SYSTEM, QOS_NONE = "LSE", "LSR", "LS", "BE", "SYSTEM", ""
QOS_CLASSES = (QOS_LSE, QOS_LSR, QOS_LS, QOS_BE, QOS_SYSTEM)

LABEL_PRIORITY_CLASS = "koordinator.sh/priority-class"
PRIORITY_PROD, PRIORITY_MID, PRIORITY_BATCH, PRIORITY_FREE, PRIORITY_NONE = (
    "koord-prod", "koord-mid", "koord-batch", "koord-free", "")
# (class, lowest, highest) of spec.priority
PRIORITY_RANGES = ((PRIORITY_PROD, 9000, 9999), (PRIORITY_MID, 7000, 7999),
                   (PRIORITY_BATCH, 5000, 5999), (PRIORITY_FREE, 3000, 3999))

# Extended resources (milli-cores for *-cpu, bytes for *-memory).
BATCH_CPU, BATCH_MEMORY = "kubernetes.io/batch-cpu", "kubernetes.io/batch-memory"
DEPRECATED_BATCH_CPU, DEPRECATED_BATCH_MEMORY = "koordinator.sh/batch-cpu", "koordinator.sh/batch-memory"
MID_CPU, MID_MEMORY = "kubernetes.io/mid-cpu", "kubernetes.io/mid-memory"

# Kubernetes QoS classes as they appear in pod.status.qosClass.
KUBE_GUARANTEED, KUBE_BURSTABLE, KUBE_BESTEFFORT = "Guaranteed", "Burstable", "BestEffort"

# NodeSLO (cluster-scoped CR named after the node) and the slo-controller-config ConfigMap that koord-manager
# turns into it (apis/slo/v1alpha1/nodeslo_types.go; apis/configuration/slo_controller_config.go).
NODESLO_API_VERSION, NODESLO_KIND = "slo.koordinator.sh/v1alpha1", "NodeSLO"
SLO_CONFIG_NAMESPACE, SLO_CONFIG_NAME = "koordinator-system", "slo-controller-config"
SLO_CFG_COLOCATION = "colocation-config"                      # does not feed NodeSLO
SLO_CFG_RESOURCE_THRESHOLD = "resource-threshold-config"      # -> spec.resourceUsedThresholdWithBE
SLO_CFG_RESOURCE_QOS = "resource-qos-config"                  # -> spec.resourceQOSStrategy
SLO_CFG_CPU_BURST = "cpu-burst-config"                        # -> spec.cpuBurstStrategy
SLO_CFG_SYSTEM = "system-config"                              # -> spec.systemStrategy
SLO_CFG_HOST_APPLICATION = "host-application-config"          # -> spec.hostApplications
SLO_CFG_CPU_NORMALIZATION = "cpu-normalization-config"        # does not feed NodeSLO
SLO_CFG_RESOURCE_AMPLIFICATION = "resource-amplification-config"  # does not feed NodeSLO
# Node annotation (a quantity) that overrides systemStrategy.totalNetworkBandwidth for that node.
ANNOTATION_NODE_NETWORK_BANDWIDTH = "node.koordinator.sh/network-bandwidth"

# NodeSLO enum values (apis/slo/v1alpha1/nodeslo_types.go, host_application.go).
CPU_POLICY_GROUP_IDENTITY, CPU_POLICY_CORE_SCHED = "groupIdentity", "coreSched"
NET_QOS_POLICY_TC, NET_QOS_POLICY_TERWAY = "tc", "terway-qos"
CPU_SUPPRESS_CPUSET, CPU_SUPPRESS_CFS_QUOTA = "cpuset", "cfsQuota"
CPU_EVICT_BY_REAL_LIMIT, CPU_EVICT_BY_ALLOCATABLE = "evictByRealLimit", "evictByAllocatable"
CPU_BURST_NONE, CPU_BURST_ONLY = "none", "cpuBurstOnly"
CFS_QUOTA_BURST_ONLY, CPU_BURST_AUTO = "cfsQuotaBurstOnly", "auto"
BLOCK_TYPE_DEVICE, BLOCK_TYPE_VOLUME_GROUP, BLOCK_TYPE_POD_VOLUME = "device", "volumegroup", "podvolume"
CGROUP_BASE_ROOT, CGROUP_BASE_KUBEPODS = "CgroupRoot", "Kubepods"
CGROUP_BASE_KUBE_BURSTABLE, CGROUP_BASE_KUBE_BESTEFFORT = "KubepodsBurstable", "KubepodsBesteffort"

# NodeResourceTopology annotations (apis/extension/numa_aware.go, cpu_normalization.go).
ANNOTATION_CPU_TOPOLOGY = "node.koordinator.sh/cpu-topology"
ANNOTATION_CPU_BASIC_INFO = "node.koordinator.sh/cpu-basic-info"
ANNOTATION_CPU_SHARED_POOLS = "node.koordinator.sh/cpu-shared-pools"
ANNOTATION_BE_CPU_SHARED_POOLS = "node.koordinator.sh/be-cpu-shared-pools"
ANNOTATION_KUBELET_CPU_MANAGER_POLICY = "kubelet.koordinator.sh/cpu-manager-policy"
ANNOTATION_POD_CPU_ALLOCS = "node.koordinator.sh/pod-cpu-allocs"
ANNOTATION_NODE_RESERVATION = "node.koordinator.sh/reservation"          # also read from the Node
ANNOTATION_SYSTEM_QOS_RESOURCE = "node.koordinator.sh/system-qos-resource"  # also read from the Node
LABEL_ENABLE_NUMA_RESERVATION = "node.koordinator.sh/enable-numa-reservation"  # copied from the Node
LABEL_MANAGED_BY, MANAGED_BY_KOORDINATOR = "app.kubernetes.io/managed-by", "Koordinator"

# Pod annotation written by koord-scheduler: {"cpuset": "0-3", "numaNodeResources": [...]}.
ANNOTATION_RESOURCE_STATUS = "scheduling.koordinator.sh/resource-status"
# Node annotation: the allocatable base for prod reclaimable prediction (apis/extension/node_resource_amplification.go).
ANNOTATION_RAW_ALLOCATABLE = "node.koordinator.sh/raw-allocatable"

# Device CR (scheduling.koordinator.sh/v1alpha1 Device: apis/scheduling/v1alpha1/device_types.go,
# apis/extension/device_share.go).
DEVICE_GPU, DEVICE_RDMA, DEVICE_FPGA = "gpu", "rdma", "fpga"
RESOURCE_GPU_CORE = "koordinator.sh/gpu-core"                 # percent of one card's compute (card = 100)
RESOURCE_GPU_MEMORY = "koordinator.sh/gpu-memory"             # bytes
RESOURCE_GPU_MEMORY_RATIO = "koordinator.sh/gpu-memory-ratio" # percent of one card's memory (card = 100)
# Pod label selecting HAMi-core isolation; the value is compared case-sensitively, as upstream's constant
LABEL_GPU_ISOLATION_PROVIDER = "koordinator.sh/gpu-isolation-provider"
GPU_ISOLATION_HAMI_CORE = "HAMi-core"
RESOURCE_RDMA = "koordinator.sh/rdma"                         # percent of one PF (PF = 100)
LABEL_GPU_VENDOR = "node.koordinator.sh/gpu-vendor"
LABEL_GPU_MODEL = "node.koordinator.sh/gpu-model"
LABEL_GPU_DRIVER_VERSION = "node.koordinator.sh/gpu-driver-version"
LABEL_GPU_PARTITION_POLICY = "node.koordinator.sh/gpu-partition-policy"
# Beyond upstream: a device label on a GPU in MIG mode ("enabled"), so a scheduler does not offer it as whole cards
LABEL_GPU_MIG = "node.koordinator.sh/gpu-mig"
PARTITION_POLICY_HONOR, PARTITION_POLICY_PREFER = "Honor", "Prefer"
GPU_VENDOR_NVIDIA = "nvidia"
ANNOTATION_GPU_PARTITIONS = "scheduling.koordinator.sh/gpu-partitions"
GPU_LINK_NVLINK, GPU_LINK_PCIE = "NVLink", "PCIe"            # gpuLinkType ("PCIe" is ours: upstream names only NVLink)
CONDITION_HEALTHY = "Healthy"
# Pod annotation written by koord-scheduler at PreBind: {"gpu": [{"minor", "resources", "id"}], "rdma": [...]}.
ANNOTATION_DEVICE_ALLOCATED = "scheduling.koordinator.sh/device-allocated"
# Container resources that ask for a device, by device type (apis/extension/device_share.go, after the rename of
# the deprecated kubernetes.io/ names in apis/extension/deprecated.go); the PodResources proxy gives a pod's devices
# to the containers that asked.
RESOURCE_GPU_SHARED = "koordinator.sh/gpu.shared"             # with a dot: how many cards share the request
RESOURCE_GPU = "koordinator.sh/gpu"                           # percent of one card (core and memory ratio)
RESOURCE_FPGA = "koordinator.sh/fpga"
WHOLE_GPU_RESOURCES = ("nvidia.com/gpu", "amd.com/gpu", "dcu.com/gpu")   # integer card counts
DEVICE_RESOURCES: dict[str, str] = {
    **dict.fromkeys(WHOLE_GPU_RESOURCES, DEVICE_GPU),
    RESOURCE_GPU: DEVICE_GPU, RESOURCE_GPU_CORE: DEVICE_GPU, RESOURCE_GPU_MEMORY: DEVICE_GPU,
    RESOURCE_GPU_MEMORY_RATIO: DEVICE_GPU, RESOURCE_GPU_SHARED: DEVICE_GPU,
    "huawei.com/npu-core": DEVICE_GPU, "huawei.com/npu-cpu": DEVICE_GPU, "huawei.com/npu-dvpp": DEVICE_GPU,
    RESOURCE_RDMA: DEVICE_RDMA, RESOURCE_FPGA: DEVICE_FPGA,
}
# The resource name each device type is listed under in PodResources answers (Multus matches it against the
# NetworkAttachmentDefinition's k8s.v1.cni.cncf.io/resourceName). Upstream lists other types with name "".
PODRESOURCES_NAMES = {DEVICE_GPU: "nvidia.com/gpu", DEVICE_RDMA: RESOURCE_RDMA, DEVICE_FPGA: RESOURCE_FPGA}

# QoS enforcement (apis/extension/constants.go, apis/slo/v1alpha1/pod.go, and the hooks and plugins that read them):
# pod annotations/labels the strategies read.
ANNOTATION_POD_CPU_QOS = "koordinator.sh/cpuQOS"              # {"enable", "groupIdentity"} (raw class LS only)
ANNOTATION_POD_CPU_BURST = "koordinator.sh/cpuBurst"          # CPUBurstConfig overlay
ANNOTATION_POD_MEMORY_QOS = "koordinator.sh/memoryQOS"        # {"policy": "default|none|auto", ...}
LABEL_CORE_SCHED_GROUP_ID = "koordinator.sh/core-sched-group-id"
LABEL_CORE_SCHED_POLICY = "koordinator.sh/core-sched-policy"  # "exclusive" | "none"
ANNOTATION_CPU_NORMALIZATION_RATIO = "node.koordinator.sh/cpu-normalization-ratio"   # on the Node
LABEL_EVICTION_ENABLED = "koordinator.sh/eviction-enabled"
ANNOTATION_EVICTION_POLICY = "koordinator.sh/eviction-policy"
ANNOTATION_EVICTION_PRIORITY = "koordinator.sh/eviction-priority"
LABEL_POD_PRIORITY = "koordinator.sh/priority"
ANNOTATION_POD_RESCTRL = "node.koordinator.sh/resctrl"      # {"llc": {...}, "mb": {...}} pod-level resctrl group
ANNOTATION_POD_NETWORK_QOS = "koordinator.sh/networkQOS"    # {"ingressLimit": "10M", "egressLimit": "20M"} bits/s
# {"containers": {"<name>": {"requests": {...}, "limits": {...}}}}: extended resources where the runtime cannot see
# the pod spec (the NRI hook); apis/extension/resource.go.
ANNOTATION_EXTENDED_RESOURCE_SPEC = "node.koordinator.sh/extended-resource-spec"
ANNOTATION_OOM_SCORE_ADJ = "koordinator.sh/oom-score-adj"             # int, every container of the pod
ANNOTATION_OOM_SCORE_ADJ_SPEC = "koordinator.sh/oom-score-adj-spec"   # {"<container>": int}, beats the above
ANNOTATION_POD_BLKIO_QOS = "koordinator.sh/blkioQOS"        # {"blocks": [{"name", "type": "podvolume", "ioCfg"}]}

# Koordinator YARN Copilot (koordinator-sh/yarn-copilot pkg/copilot-agent; koordlet's evict-by-copilot-agent flags)
LABEL_COMPONENT, COMPONENT_NODE_MANAGER = "app.kubernetes.io/component", "node-manager"   # the NodeManager pod
YARN_NAMESPACE = "yarn"                                       # the namespace the copilot gives every YARN container
