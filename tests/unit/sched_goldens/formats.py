"""Golden device-allocated strings for the formatter alone (no allocation): upstream's marshal literals and Go's
quantity/omitempty rules."""

from tests.unit.sched_goldens.fixtures import FAKE_DEVICE_CR

# FORMATS: name, source, device (Device CR for ids, or None), allocations (a device-allocated value as read),
# expect (what Go's json.Marshal writes back, ids from the CR when one is given).

FORMATS = [
    {
        'name': 'Test_Plugin_PreBind/pre-bind successfully, deviceCR with topology',
        'source': 'pkg/scheduler/plugins/deviceshare/plugin_test.go',
        'device': FAKE_DEVICE_CR,
        'allocations': (
            '{"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"16Gi",'
            '"koordinator.sh/gpu-memory-ratio":"100"}},{"minor":1,"resources":{"koordinator.sh/gpu-core":"100",'
            '"koordinator.sh/gpu-memory":"16Gi","koordinator.sh/gpu-memory-ratio":"100"}}],"rdma":[{"minor":1,'
            '"resources":{"koordinator.sh/rdma":"100"}}]}'
        ),
        'expect': (
            '{"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"16Gi",'
            '"koordinator.sh/gpu-memory-ratio":"100"},"id":"GPU-8c25ea37-2909-6e62-b7bf-e2fcadebea8d"},{"minor":1,'
            '"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"16Gi",'
            '"koordinator.sh/gpu-memory-ratio":"100"},"id":"GPU-befd76c3-8a36-7b8a-179c-eae75aa7d9f2"}],'
            '"rdma":[{"minor":1,"resources":{"koordinator.sh/rdma":"100"},"id":"0000:1f:00.0"}]}'
        ),
        'note': "upstream's literal; ids come from the node's Device CR (fillID)",
    },
    {
        'name': 'Test_SetDeviceAllocations/valid allocations',
        'source': 'apis/extension/device_share_test.go',
        'device': None,
        'allocations': (
            '{"gpu":[{"minor":1,"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"16Gi",'
            '"koordinator.sh/gpu-memory-ratio":"100"}}]}'
        ),
        'expect': (
            '{"gpu":[{"minor":1,"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"16Gi",'
            '"koordinator.sh/gpu-memory-ratio":"100"}}]}'
        ),
        'note': "upstream's literal",
    },
    {
        'name': 'Test_GetDeviceAllocations/correct annotations with busID',
        'source': 'apis/extension/device_share_test.go',
        'device': None,
        'allocations': (
            '{"gpu":[{"minor":1,"id": "0000:08.00.0","resources":{"koordinator.sh/gpu-core":"100",'
            '"koordinator.sh/gpu-memory":"16Gi","koordinator.sh/gpu-memory-ratio":"100"}}]}'
        ),
        'expect': (
            '{"gpu":[{"minor":1,"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"16Gi",'
            '"koordinator.sh/gpu-memory-ratio":"100"},"id":"0000:08.00.0"}]}'
        ),
        'note': "upstream's input literal; marshalled again: id after resources, no spaces",
    },
    {
        'name': 'derived: quantities are written in canonical form',
        'source': 'k8s.io/apimachinery resource.Quantity',
        'device': None,
        'allocations': (
            '{"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-memory":"8192Mi",'
            '"koordinator.sh/gpu-core":"100"}}]}'
        ),
        'expect': (
            '{"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"8Gi"}}]}'
        ),
        'note': 'Quantity.String() after UnmarshalJSON is canonical (8192Mi -> 8Gi); map keys sorted',
    },
    {
        'name': 'derived: a VF minor 0 is omitted, -1 is written',
        'source': 'apis/extension/device_share.go',
        'device': None,
        'allocations': (
            '{"rdma":[{"minor":1,"resources":{"koordinator.sh/rdma":"1"},"extension":{"vfs":[{"minor":0,'
            '"busID":"0000:1f:00.2"}]}},{"minor":2,"resources":{"koordinator.sh/rdma":"1"},'
            '"extension":{"vfs":[{"minor":-1,"busID":"0000:90:00.2"}]}}]}'
        ),
        'expect': (
            '{"rdma":[{"minor":1,"resources":{"koordinator.sh/rdma":"1"},'
            '"extension":{"vfs":[{"busID":"0000:1f:00.2"}]}},{"minor":2,"resources":{"koordinator.sh/rdma":"1"},'
            '"extension":{"vfs":[{"minor":-1,"busID":"0000:90:00.2"}]}}]}'
        ),
        'note': "VirtualFunction's minor and busID are omitempty",
    },
]
