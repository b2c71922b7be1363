"""Golden cases derived from reading koord-scheduler's code where its tests have none (named 'derived: ...'), and one
upstream case that needs no Device CR. Each note names the code path the expectation follows."""

from tests.unit.sched_goldens.fixtures import (
    CR_ONE_VF_NIC_4_PCIE,
    FAKE_DEVICE_CR,
    FAKE_DEVICE_CR_WELL_PLANNED,
    SIMPLE_NODE_CR,
)

# CASES: list of dicts. name: upstream test / case name ('derived: ...' for code-derived ones); source: upstream
# file; device: the node's Device CR (None: no CR); node: the Node object or None; assigned: device-allocated
# annotations of pods already on the node; pod: the incoming pod; scored/strategy (and weights, when not the
# defaults): Filter trial (unscored) or Reserve (scored with that strategy); expect: the exact device-allocated value
# ('' = no device request / nothing written); fail: {reason | reason_any_of, unresolvable}; note: how the expectation
# was derived (upstream compares structs sorted by minor; the strings are what PreBind's json.Marshal writes).

CASES = [
    {
        'name': 'derived: partitions: the lower allocationScore group is tried first',
        'source': 'pkg/scheduler/plugins/deviceshare/allocator_gpu.go',
        'device': {
            'metadata': {
                'name': 'part-node',
                'annotations': {
                    'scheduling.koordinator.sh/gpu-partitions': (
                        '{"2":[{"minors":[0,1],"gpuLinkType":"NVLink","allocationScore":2},{"minors":[2,3],'
                        '"gpuLinkType":"NVLink","allocationScore":1}]}'
                    ),
                },
                'labels': {'node.koordinator.sh/gpu-partition-policy': 'Honor'},
            },
            'spec': {
                'devices': [
                    {
                        'type': 'gpu',
                        'id': 'GPU-part-0',
                        'minor': 0,
                        'health': True,
                        'resources': {
                            'koordinator.sh/gpu-core': '100',
                            'koordinator.sh/gpu-memory-ratio': '100',
                            'koordinator.sh/gpu-memory': '16Gi',
                        },
                    },
                    {
                        'type': 'gpu',
                        'id': 'GPU-part-1',
                        'minor': 1,
                        'health': True,
                        'resources': {
                            'koordinator.sh/gpu-core': '100',
                            'koordinator.sh/gpu-memory-ratio': '100',
                            'koordinator.sh/gpu-memory': '16Gi',
                        },
                    },
                    {
                        'type': 'gpu',
                        'id': 'GPU-part-2',
                        'minor': 2,
                        'health': True,
                        'resources': {
                            'koordinator.sh/gpu-core': '100',
                            'koordinator.sh/gpu-memory-ratio': '100',
                            'koordinator.sh/gpu-memory': '16Gi',
                        },
                    },
                    {
                        'type': 'gpu',
                        'id': 'GPU-part-3',
                        'minor': 3,
                        'health': True,
                        'resources': {
                            'koordinator.sh/gpu-core': '100',
                            'koordinator.sh/gpu-memory-ratio': '100',
                            'koordinator.sh/gpu-memory': '16Gi',
                        },
                    },
                ],
            },
        },
        'node': None,
        'assigned': [],
        'pod': {
            'metadata': {'namespace': 'default', 'name': 'test-pod', 'uid': 'uid-test-pod'},
            'spec': {'containers': [{'name': 'main', 'resources': {'requests': {'nvidia.com/gpu': '2'}}}]},
        },
        'scored': False,
        'strategy': 'LeastAllocated',
        'expect': (
            '{"gpu":[{"minor":2,"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"16Gi",'
            '"koordinator.sh/gpu-memory-ratio":"100"},"id":"GPU-part-2"},{"minor":3,'
            '"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"16Gi",'
            '"koordinator.sh/gpu-memory-ratio":"100"},"id":"GPU-part-3"}]}'
        ),
        'fail': None,
        'note': (
            'allocator_gpu_helper.go GetGPUPartitionIndexer sorts groups by ascending allocationScore and '
            "allocateByPartition takes the first group with a feasible partition; the CR's own "
            'table and its Honor label'
        ),
    },
    {
        'name': 'derived: partitions: Restricted stops after the first group',
        'source': 'pkg/scheduler/plugins/deviceshare/allocator_gpu.go',
        'device': {
            'metadata': {
                'name': 'part-node',
                'annotations': {
                    'scheduling.koordinator.sh/gpu-partitions': (
                        '{"2":[{"minors":[0,1],"gpuLinkType":"NVLink","allocationScore":2},{"minors":[2,3],'
                        '"gpuLinkType":"NVLink","allocationScore":1}]}'
                    ),
                },
                'labels': {'node.koordinator.sh/gpu-partition-policy': 'Honor'},
            },
            'spec': {
                'devices': [
                    {
                        'type': 'gpu',
                        'id': 'GPU-part-0',
                        'minor': 0,
                        'health': True,
                        'resources': {
                            'koordinator.sh/gpu-core': '100',
                            'koordinator.sh/gpu-memory-ratio': '100',
                            'koordinator.sh/gpu-memory': '16Gi',
                        },
                    },
                    {
                        'type': 'gpu',
                        'id': 'GPU-part-1',
                        'minor': 1,
                        'health': True,
                        'resources': {
                            'koordinator.sh/gpu-core': '100',
                            'koordinator.sh/gpu-memory-ratio': '100',
                            'koordinator.sh/gpu-memory': '16Gi',
                        },
                    },
                    {
                        'type': 'gpu',
                        'id': 'GPU-part-2',
                        'minor': 2,
                        'health': True,
                        'resources': {
                            'koordinator.sh/gpu-core': '100',
                            'koordinator.sh/gpu-memory-ratio': '100',
                            'koordinator.sh/gpu-memory': '16Gi',
                        },
                    },
                    {
                        'type': 'gpu',
                        'id': 'GPU-part-3',
                        'minor': 3,
                        'health': True,
                        'resources': {
                            'koordinator.sh/gpu-core': '100',
                            'koordinator.sh/gpu-memory-ratio': '100',
                            'koordinator.sh/gpu-memory': '16Gi',
                        },
                    },
                ],
            },
        },
        'node': None,
        'assigned': [
            (
                '{"gpu":[{"minor":2,"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"16Gi",'
                '"koordinator.sh/gpu-memory-ratio":"100"}}]}'
            ),
        ],
        'pod': {
            'metadata': {
                'namespace': 'default',
                'name': 'test-pod',
                'uid': 'uid-test-pod',
                'annotations': {'scheduling.koordinator.sh/gpu-partition-spec': '{"allocatePolicy":"Restricted"}'},
            },
            'spec': {'containers': [{'name': 'main', 'resources': {'requests': {'nvidia.com/gpu': '2'}}}]},
        },
        'scored': False,
        'strategy': 'LeastAllocated',
        'expect': None,
        'fail': {'reason': 'Insufficient Partitioned GPU Devices', 'unresolvable': False},
        'note': (
            'allocator_gpu_helper.go GetGPUPartitionIndexer sorts groups by ascending allocationScore and '
            'allocateByPartition takes the first group with a feasible partition; card 2 is used, '
            'so the score-1 group has nothing, and Restricted does not go on'
        ),
    },
    {
        'name': 'derived: partitions: BestEffort goes on to the next group',
        'source': 'pkg/scheduler/plugins/deviceshare/allocator_gpu.go',
        'device': {
            'metadata': {
                'name': 'part-node',
                'annotations': {
                    'scheduling.koordinator.sh/gpu-partitions': (
                        '{"2":[{"minors":[0,1],"gpuLinkType":"NVLink","allocationScore":2},{"minors":[2,3],'
                        '"gpuLinkType":"NVLink","allocationScore":1}]}'
                    ),
                },
                'labels': {'node.koordinator.sh/gpu-partition-policy': 'Honor'},
            },
            'spec': {
                'devices': [
                    {
                        'type': 'gpu',
                        'id': 'GPU-part-0',
                        'minor': 0,
                        'health': True,
                        'resources': {
                            'koordinator.sh/gpu-core': '100',
                            'koordinator.sh/gpu-memory-ratio': '100',
                            'koordinator.sh/gpu-memory': '16Gi',
                        },
                    },
                    {
                        'type': 'gpu',
                        'id': 'GPU-part-1',
                        'minor': 1,
                        'health': True,
                        'resources': {
                            'koordinator.sh/gpu-core': '100',
                            'koordinator.sh/gpu-memory-ratio': '100',
                            'koordinator.sh/gpu-memory': '16Gi',
                        },
                    },
                    {
                        'type': 'gpu',
                        'id': 'GPU-part-2',
                        'minor': 2,
                        'health': True,
                        'resources': {
                            'koordinator.sh/gpu-core': '100',
                            'koordinator.sh/gpu-memory-ratio': '100',
                            'koordinator.sh/gpu-memory': '16Gi',
                        },
                    },
                    {
                        'type': 'gpu',
                        'id': 'GPU-part-3',
                        'minor': 3,
                        'health': True,
                        'resources': {
                            'koordinator.sh/gpu-core': '100',
                            'koordinator.sh/gpu-memory-ratio': '100',
                            'koordinator.sh/gpu-memory': '16Gi',
                        },
                    },
                ],
            },
        },
        'node': None,
        'assigned': [
            (
                '{"gpu":[{"minor":2,"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"16Gi",'
                '"koordinator.sh/gpu-memory-ratio":"100"}}]}'
            ),
        ],
        'pod': {
            'metadata': {
                'namespace': 'default',
                'name': 'test-pod',
                'uid': 'uid-test-pod',
                'annotations': {'scheduling.koordinator.sh/gpu-partition-spec': '{}'},
            },
            'spec': {'containers': [{'name': 'main', 'resources': {'requests': {'nvidia.com/gpu': '2'}}}]},
        },
        'scored': False,
        'strategy': 'LeastAllocated',
        'expect': (
            '{"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"16Gi",'
            '"koordinator.sh/gpu-memory-ratio":"100"},"id":"GPU-part-0"},{"minor":1,'
            '"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"16Gi",'
            '"koordinator.sh/gpu-memory-ratio":"100"},"id":"GPU-part-1"}]}'
        ),
        'fail': None,
        'note': (
            'allocator_gpu_helper.go GetGPUPartitionIndexer sorts groups by ascending allocationScore and '
            'allocateByPartition takes the first group with a feasible partition; an empty '
            'partition spec means BestEffort (GetGPUPartitionSpec)'
        ),
    },
    {
        'name': 'derived: partitions: ringBusBandwidth leaves out slower partitions',
        'source': 'pkg/scheduler/plugins/deviceshare/allocator_gpu.go',
        'device': {
            'metadata': {
                'name': 'part-node',
                'annotations': {
                    'scheduling.koordinator.sh/gpu-partitions': (
                        '{"2":[{"minors":[0,1],"ringBusBandwidth":"100Gi","allocationScore":1},{"minors":[2,3],'
                        '"ringBusBandwidth":"200Gi","allocationScore":1}]}'
                    ),
                },
                'labels': {'node.koordinator.sh/gpu-partition-policy': 'Honor'},
            },
            'spec': {
                'devices': [
                    {
                        'type': 'gpu',
                        'id': 'GPU-part-0',
                        'minor': 0,
                        'health': True,
                        'resources': {
                            'koordinator.sh/gpu-core': '100',
                            'koordinator.sh/gpu-memory-ratio': '100',
                            'koordinator.sh/gpu-memory': '16Gi',
                        },
                    },
                    {
                        'type': 'gpu',
                        'id': 'GPU-part-1',
                        'minor': 1,
                        'health': True,
                        'resources': {
                            'koordinator.sh/gpu-core': '100',
                            'koordinator.sh/gpu-memory-ratio': '100',
                            'koordinator.sh/gpu-memory': '16Gi',
                        },
                    },
                    {
                        'type': 'gpu',
                        'id': 'GPU-part-2',
                        'minor': 2,
                        'health': True,
                        'resources': {
                            'koordinator.sh/gpu-core': '100',
                            'koordinator.sh/gpu-memory-ratio': '100',
                            'koordinator.sh/gpu-memory': '16Gi',
                        },
                    },
                    {
                        'type': 'gpu',
                        'id': 'GPU-part-3',
                        'minor': 3,
                        'health': True,
                        'resources': {
                            'koordinator.sh/gpu-core': '100',
                            'koordinator.sh/gpu-memory-ratio': '100',
                            'koordinator.sh/gpu-memory': '16Gi',
                        },
                    },
                ],
            },
        },
        'node': None,
        'assigned': [],
        'pod': {
            'metadata': {
                'namespace': 'default',
                'name': 'test-pod',
                'uid': 'uid-test-pod',
                'annotations': {'scheduling.koordinator.sh/gpu-partition-spec': '{"ringBusBandwidth":"200Gi"}'},
            },
            'spec': {'containers': [{'name': 'main', 'resources': {'requests': {'nvidia.com/gpu': '2'}}}]},
        },
        'scored': False,
        'strategy': 'LeastAllocated',
        'expect': (
            '{"gpu":[{"minor":2,"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"16Gi",'
            '"koordinator.sh/gpu-memory-ratio":"100"},"id":"GPU-part-2"},{"minor":3,'
            '"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"16Gi",'
            '"koordinator.sh/gpu-memory-ratio":"100"},"id":"GPU-part-3"}]}'
        ),
        'fail': None,
        'note': "a partition whose bandwidth is below the pod's ringBusBandwidth is not feasible",
    },
    {
        'name': 'derived: partitions: a partition spec on a node without a table',
        'source': 'pkg/scheduler/plugins/deviceshare/allocator_gpu.go',
        'device': SIMPLE_NODE_CR,
        'node': None,
        'assigned': [],
        'pod': {
            'metadata': {
                'namespace': 'default',
                'name': 'test-pod',
                'uid': 'uid-test-pod',
                'annotations': {'scheduling.koordinator.sh/gpu-partition-spec': '{"allocatePolicy":"BestEffort"}'},
            },
            'spec': {'containers': [{'name': 'main', 'resources': {'requests': {'nvidia.com/gpu': '1'}}}]},
        },
        'scored': False,
        'strategy': 'LeastAllocated',
        'expect': None,
        'fail': {'reason': 'node(s) missing GPU Partition Table', 'unresolvable': True},
        'note': "the pod's partition spec alone makes the stage honored (parseGPURequirements)",
    },
    {
        'name': 'derived: partitions: Honor and a card count the table lacks',
        'source': 'pkg/scheduler/plugins/deviceshare/allocator_gpu.go',
        'device': {
            'metadata': {
                'name': 'part-node',
                'annotations': {
                    'scheduling.koordinator.sh/gpu-partitions': (
                        '{"2":[{"minors":[0,1],"gpuLinkType":"NVLink","allocationScore":2},{"minors":[2,3],'
                        '"gpuLinkType":"NVLink","allocationScore":1}]}'
                    ),
                },
                'labels': {'node.koordinator.sh/gpu-partition-policy': 'Honor'},
            },
            'spec': {
                'devices': [
                    {
                        'type': 'gpu',
                        'id': 'GPU-part-0',
                        'minor': 0,
                        'health': True,
                        'resources': {
                            'koordinator.sh/gpu-core': '100',
                            'koordinator.sh/gpu-memory-ratio': '100',
                            'koordinator.sh/gpu-memory': '16Gi',
                        },
                    },
                    {
                        'type': 'gpu',
                        'id': 'GPU-part-1',
                        'minor': 1,
                        'health': True,
                        'resources': {
                            'koordinator.sh/gpu-core': '100',
                            'koordinator.sh/gpu-memory-ratio': '100',
                            'koordinator.sh/gpu-memory': '16Gi',
                        },
                    },
                    {
                        'type': 'gpu',
                        'id': 'GPU-part-2',
                        'minor': 2,
                        'health': True,
                        'resources': {
                            'koordinator.sh/gpu-core': '100',
                            'koordinator.sh/gpu-memory-ratio': '100',
                            'koordinator.sh/gpu-memory': '16Gi',
                        },
                    },
                    {
                        'type': 'gpu',
                        'id': 'GPU-part-3',
                        'minor': 3,
                        'health': True,
                        'resources': {
                            'koordinator.sh/gpu-core': '100',
                            'koordinator.sh/gpu-memory-ratio': '100',
                            'koordinator.sh/gpu-memory': '16Gi',
                        },
                    },
                ],
            },
        },
        'node': None,
        'assigned': [],
        'pod': {
            'metadata': {'namespace': 'default', 'name': 'test-pod', 'uid': 'uid-test-pod'},
            'spec': {'containers': [{'name': 'main', 'resources': {'requests': {'nvidia.com/gpu': '1'}}}]},
        },
        'scored': False,
        'strategy': 'LeastAllocated',
        'expect': None,
        'fail': {'reason': 'node(s) Unsupported number of GPU requests', 'unresolvable': True},
    },
    {
        'name': "derived: partitions: with a table on the CR the Node's Honor label does not count",
        'source': 'pkg/scheduler/plugins/deviceshare/allocator_gpu.go',
        'device': {
            'metadata': {
                'name': 'part-node',
                'annotations': {
                    'scheduling.koordinator.sh/gpu-partitions': (
                        '{"2":[{"minors":[0,1],"gpuLinkType":"NVLink","allocationScore":2},{"minors":[2,3],'
                        '"gpuLinkType":"NVLink","allocationScore":1}]}'
                    ),
                },
            },
            'spec': {
                'devices': [
                    {
                        'type': 'gpu',
                        'id': 'GPU-part-0',
                        'minor': 0,
                        'health': True,
                        'resources': {
                            'koordinator.sh/gpu-core': '100',
                            'koordinator.sh/gpu-memory-ratio': '100',
                            'koordinator.sh/gpu-memory': '16Gi',
                        },
                    },
                    {
                        'type': 'gpu',
                        'id': 'GPU-part-1',
                        'minor': 1,
                        'health': True,
                        'resources': {
                            'koordinator.sh/gpu-core': '100',
                            'koordinator.sh/gpu-memory-ratio': '100',
                            'koordinator.sh/gpu-memory': '16Gi',
                        },
                    },
                    {
                        'type': 'gpu',
                        'id': 'GPU-part-2',
                        'minor': 2,
                        'health': True,
                        'resources': {
                            'koordinator.sh/gpu-core': '100',
                            'koordinator.sh/gpu-memory-ratio': '100',
                            'koordinator.sh/gpu-memory': '16Gi',
                        },
                    },
                    {
                        'type': 'gpu',
                        'id': 'GPU-part-3',
                        'minor': 3,
                        'health': True,
                        'resources': {
                            'koordinator.sh/gpu-core': '100',
                            'koordinator.sh/gpu-memory-ratio': '100',
                            'koordinator.sh/gpu-memory': '16Gi',
                        },
                    },
                ],
            },
        },
        'node': {'metadata': {'name': 'part-node', 'labels': {'node.koordinator.sh/gpu-partition-policy': 'Honor'}}},
        'assigned': [],
        'pod': {
            'metadata': {'namespace': 'default', 'name': 'test-pod', 'uid': 'uid-test-pod'},
            'spec': {'containers': [{'name': 'main', 'resources': {'requests': {'nvidia.com/gpu': '1'}}}]},
        },
        'scored': False,
        'strategy': 'LeastAllocated',
        'expect': (
            '{"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"16Gi",'
            '"koordinator.sh/gpu-memory-ratio":"100"},"id":"GPU-part-0"}]}'
        ),
        'fail': None,
        'note': (
            "nodeHonorGPUPartition comes from the Device CR's labels when the CR has a table (device_cache.go "
            'updateNodeDevice); Prefer swallows the missing 1-card entry and the default allocator takes card 0'
        ),
    },
    {
        'name': 'derived: shared GPU in a topology scope: MostAllocated ties partly used cards',
        'source': 'pkg/scheduler/plugins/deviceshare/allocator_gpu.go',
        'device': {
            'metadata': {'name': 'topo-node'},
            'spec': {
                'devices': [
                    {
                        'type': 'gpu',
                        'id': 'GPU-topo-0',
                        'minor': 0,
                        'health': True,
                        'resources': {
                            'koordinator.sh/gpu-core': '100',
                            'koordinator.sh/gpu-memory-ratio': '100',
                            'koordinator.sh/gpu-memory': '16Gi',
                        },
                        'topology': {'socketID': -1, 'nodeID': 0, 'pcieID': '0000:00:01.0'},
                    },
                    {
                        'type': 'gpu',
                        'id': 'GPU-topo-1',
                        'minor': 1,
                        'health': True,
                        'resources': {
                            'koordinator.sh/gpu-core': '100',
                            'koordinator.sh/gpu-memory-ratio': '100',
                            'koordinator.sh/gpu-memory': '16Gi',
                        },
                        'topology': {'socketID': -1, 'nodeID': 0, 'pcieID': '0000:00:01.0'},
                    },
                    {
                        'type': 'gpu',
                        'id': 'GPU-topo-2',
                        'minor': 2,
                        'health': True,
                        'resources': {
                            'koordinator.sh/gpu-core': '100',
                            'koordinator.sh/gpu-memory-ratio': '100',
                            'koordinator.sh/gpu-memory': '16Gi',
                        },
                        'topology': {'socketID': -1, 'nodeID': 0, 'pcieID': '0000:00:01.0'},
                    },
                ],
            },
        },
        'node': None,
        'assigned': [
            (
                '{"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":"25","koordinator.sh/gpu-memory":"4Gi",'
                '"koordinator.sh/gpu-memory-ratio":"25"}}]}'
            ),
            (
                '{"gpu":[{"minor":1,"resources":{"koordinator.sh/gpu-core":"50","koordinator.sh/gpu-memory":"8Gi",'
                '"koordinator.sh/gpu-memory-ratio":"50"}}]}'
            ),
        ],
        'pod': {
            'metadata': {'namespace': 'default', 'name': 'test-pod', 'uid': 'uid-test-pod'},
            'spec': {
                'containers': [
                    {
                        'name': 'main',
                        'resources': {
                            'requests': {'koordinator.sh/gpu-core': '25', 'koordinator.sh/gpu-memory-ratio': '25'},
                        },
                    },
                ],
            },
        },
        'scored': True,
        'strategy': 'MostAllocated',
        'expect': (
            '{"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":"25","koordinator.sh/gpu-memory":"4Gi",'
            '"koordinator.sh/gpu-memory-ratio":"25"},"id":"GPU-topo-0"}]}'
        ),
        'fail': None,
        'note': (
            'allocateFromScope scores a card as scoreDevice(request, free, total) while the signature is (request, '
            'total, free): with the arguments swapped every partly used card that fits scores 100 under '
            'MostAllocated and 0 under LeastAllocated, so two partly used cards tie and the lower minor wins (with '
            'the arguments in order card 1, the fuller one, would win)'
        ),
    },
    {
        'name': 'derived: shared GPU in a topology scope: LeastAllocated ties partly used cards',
        'source': 'pkg/scheduler/plugins/deviceshare/allocator_gpu.go',
        'device': {
            'metadata': {'name': 'topo-node'},
            'spec': {
                'devices': [
                    {
                        'type': 'gpu',
                        'id': 'GPU-topo-0',
                        'minor': 0,
                        'health': True,
                        'resources': {
                            'koordinator.sh/gpu-core': '100',
                            'koordinator.sh/gpu-memory-ratio': '100',
                            'koordinator.sh/gpu-memory': '16Gi',
                        },
                        'topology': {'socketID': -1, 'nodeID': 0, 'pcieID': '0000:00:01.0'},
                    },
                    {
                        'type': 'gpu',
                        'id': 'GPU-topo-1',
                        'minor': 1,
                        'health': True,
                        'resources': {
                            'koordinator.sh/gpu-core': '100',
                            'koordinator.sh/gpu-memory-ratio': '100',
                            'koordinator.sh/gpu-memory': '16Gi',
                        },
                        'topology': {'socketID': -1, 'nodeID': 0, 'pcieID': '0000:00:01.0'},
                    },
                    {
                        'type': 'gpu',
                        'id': 'GPU-topo-2',
                        'minor': 2,
                        'health': True,
                        'resources': {
                            'koordinator.sh/gpu-core': '100',
                            'koordinator.sh/gpu-memory-ratio': '100',
                            'koordinator.sh/gpu-memory': '16Gi',
                        },
                        'topology': {'socketID': -1, 'nodeID': 0, 'pcieID': '0000:00:01.0'},
                    },
                ],
            },
        },
        'node': None,
        'assigned': [
            (
                '{"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":"50","koordinator.sh/gpu-memory":"8Gi",'
                '"koordinator.sh/gpu-memory-ratio":"50"}}]}'
            ),
            (
                '{"gpu":[{"minor":1,"resources":{"koordinator.sh/gpu-core":"25","koordinator.sh/gpu-memory":"4Gi",'
                '"koordinator.sh/gpu-memory-ratio":"25"}}]}'
            ),
            (
                '{"gpu":[{"minor":2,"resources":{"koordinator.sh/gpu-core":"25","koordinator.sh/gpu-memory":"4Gi",'
                '"koordinator.sh/gpu-memory-ratio":"25"}}]}'
            ),
        ],
        'pod': {
            'metadata': {'namespace': 'default', 'name': 'test-pod', 'uid': 'uid-test-pod'},
            'spec': {
                'containers': [
                    {
                        'name': 'main',
                        'resources': {
                            'requests': {'koordinator.sh/gpu-core': '25', 'koordinator.sh/gpu-memory-ratio': '25'},
                        },
                    },
                ],
            },
        },
        'scored': True,
        'strategy': 'LeastAllocated',
        'expect': (
            '{"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":"25","koordinator.sh/gpu-memory":"4Gi",'
            '"koordinator.sh/gpu-memory-ratio":"25"},"id":"GPU-topo-0"}]}'
        ),
        'fail': None,
        'note': (
            'allocateFromScope scores a card as scoreDevice(request, free, total) while the signature is (request, '
            'total, free): with the arguments swapped every partly used card that fits scores 100 under '
            'MostAllocated and 0 under LeastAllocated, so two partly used cards tie and the lower minor wins (with '
            'the arguments in order card 1 or 2, the emptier ones, would win)'
        ),
    },
    {
        'name': 'derived: PCIeLevel exclusive policy filters nothing',
        'source': 'pkg/scheduler/plugins/deviceshare/device_cache.go',
        'device': FAKE_DEVICE_CR,
        'node': {'metadata': {'name': 'test-node-1'}},
        'assigned': ['{"rdma":[{"minor":1,"resources":{"koordinator.sh/rdma":"1"}}]}'],
        'pod': {
            'metadata': {
                'namespace': 'default',
                'name': 'test-pod',
                'uid': 'uid-test-pod',
                'annotations': {
                    'scheduling.koordinator.sh/device-allocate-hint': '{"rdma":{"exclusivePolicy":"PCIeLevel"}}',
                },
            },
            'spec': {'containers': [{'name': 'main', 'resources': {'requests': {'koordinator.sh/rdma': '1'}}}]},
        },
        'scored': False,
        'strategy': 'LeastAllocated',
        'expect': '{"rdma":[{"minor":1,"resources":{"koordinator.sh/rdma":"1"},"id":"0000:1f:00.0"}]}',
        'fail': None,
        'note': (
            "nodeDevice.filter calls minors.Intersection(freeDeviceMinors) and drops the result (sets.Int's "
            'Intersection returns a new set), so a NIC on a switch that is not wholly free stays a candidate; the '
            "the PCIeLevel exclusive policy (apis/extension/device_share.go) describes the intended filter"
        ),
    },
    {
        'name': 'derived: every GPU unhealthy',
        'source': 'pkg/scheduler/plugins/deviceshare/device_cache.go',
        'device': {
            'metadata': {'name': 'topo-node'},
            'spec': {
                'devices': [
                    {
                        'type': 'gpu',
                        'id': 'GPU-topo-0',
                        'minor': 0,
                        'health': False,
                        'resources': {
                            'koordinator.sh/gpu-core': '100',
                            'koordinator.sh/gpu-memory-ratio': '100',
                            'koordinator.sh/gpu-memory': '16Gi',
                        },
                        'topology': {'socketID': -1, 'nodeID': 0, 'pcieID': '0000:00:01.0'},
                    },
                    {
                        'type': 'gpu',
                        'id': 'GPU-topo-1',
                        'minor': 1,
                        'health': False,
                        'resources': {
                            'koordinator.sh/gpu-core': '100',
                            'koordinator.sh/gpu-memory-ratio': '100',
                            'koordinator.sh/gpu-memory': '16Gi',
                        },
                        'topology': {'socketID': -1, 'nodeID': 0, 'pcieID': '0000:00:01.0'},
                    },
                ],
            },
        },
        'node': None,
        'assigned': [],
        'pod': {
            'metadata': {'namespace': 'default', 'name': 'test-pod', 'uid': 'uid-test-pod'},
            'spec': {'containers': [{'name': 'main', 'resources': {'requests': {'nvidia.com/gpu': '1'}}}]},
        },
        'scored': False,
        'strategy': 'LeastAllocated',
        'expect': None,
        'fail': {'reason': 'Insufficient GPU Devices', 'unresolvable': False},
        'note': (
            'buildDeviceResources keeps an unhealthy card with an empty resource list, so the node has GPUs (not '
            'unresolvable); the topology stage finds none that fits and reports its own text'
        ),
    },
    {
        'name': 'derived: an unhealthy GPU in a topology scope is skipped',
        'source': 'pkg/scheduler/plugins/deviceshare/allocator_gpu.go',
        'device': {
            'metadata': {'name': 'topo-node'},
            'spec': {
                'devices': [
                    {
                        'type': 'gpu',
                        'id': 'GPU-topo-0',
                        'minor': 0,
                        'health': False,
                        'resources': {
                            'koordinator.sh/gpu-core': '100',
                            'koordinator.sh/gpu-memory-ratio': '100',
                            'koordinator.sh/gpu-memory': '16Gi',
                        },
                        'topology': {'socketID': -1, 'nodeID': 0, 'pcieID': '0000:00:01.0'},
                    },
                    {
                        'type': 'gpu',
                        'id': 'GPU-topo-1',
                        'minor': 1,
                        'health': True,
                        'resources': {
                            'koordinator.sh/gpu-core': '100',
                            'koordinator.sh/gpu-memory-ratio': '100',
                            'koordinator.sh/gpu-memory': '16Gi',
                        },
                        'topology': {'socketID': -1, 'nodeID': 0, 'pcieID': '0000:00:01.0'},
                    },
                ],
            },
        },
        'node': None,
        'assigned': [],
        'pod': {
            'metadata': {'namespace': 'default', 'name': 'test-pod', 'uid': 'uid-test-pod'},
            'spec': {'containers': [{'name': 'main', 'resources': {'requests': {'nvidia.com/gpu': '1'}}}]},
        },
        'scored': False,
        'strategy': 'LeastAllocated',
        'expect': (
            '{"gpu":[{"minor":1,"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"16Gi",'
            '"koordinator.sh/gpu-memory-ratio":"100"},"id":"GPU-topo-1"}]}'
        ),
        'fail': None,
    },
    {
        'name': 'derived: gpu-memory in decimal units',
        'source': 'pkg/scheduler/plugins/deviceshare/devicehandler_gpu.go',
        'device': SIMPLE_NODE_CR,
        'node': None,
        'assigned': [],
        'pod': {
            'metadata': {'namespace': 'default', 'name': 'test-pod', 'uid': 'uid-test-pod'},
            'spec': {
                'containers': [{'name': 'main', 'resources': {'requests': {'koordinator.sh/gpu-memory': '10G'}}}],
            },
        },
        'scored': False,
        'strategy': 'LeastAllocated',
        'expect': (
            '{"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-memory":"9765625Ki",'
            '"koordinator.sh/gpu-memory-ratio":"58"},"id":"GPU-00000000-0000-0000-0000-000000000000"}]}'
        ),
        'fail': None,
        'note': (
            'the per-card memory is NewQuantity(bytes, BinarySI): 10e9 = 9765625Ki; ratio int64(10e9 / 16Gi x 100) '
            '= 58'
        ),
    },
    {
        'name': 'derived: a malformed device-allocated annotation of an assigned pod counts as nothing',
        'source': 'pkg/scheduler/plugins/deviceshare/eventhandler_pod.go',
        'device': SIMPLE_NODE_CR,
        'node': None,
        'assigned': [
            'incorrect-device-allocation',
            (
                '{"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"16Gi",'
                '"koordinator.sh/gpu-memory-ratio":"100"}}]}'
            ),
        ],
        'pod': {
            'metadata': {'namespace': 'default', 'name': 'test-pod', 'uid': 'uid-test-pod'},
            'spec': {'containers': [{'name': 'main', 'resources': {'requests': {'nvidia.com/gpu': '1'}}}]},
        },
        'scored': False,
        'strategy': 'LeastAllocated',
        'expect': (
            '{"gpu":[{"minor":1,"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"16Gi",'
            '"koordinator.sh/gpu-memory-ratio":"100"},"id":"GPU-11111111-1111-1111-1111-111111111111"}]}'
        ),
        'fail': None,
        'note': (
            "the pod event handler logs GetDeviceAllocations' error and ignores that pod (apis/extension "
            "Test_GetDeviceAllocations 'incorrect annotations' is the parse failure)"
        ),
    },
    {
        'name': 'derived: deprecated kubernetes.io names',
        'source': 'pkg/util/transformer',
        'device': SIMPLE_NODE_CR,
        'node': None,
        'assigned': [
            (
                '{"gpu":[{"minor":0,"resources":{"kubernetes.io/gpu-core":"100","kubernetes.io/gpu-memory":"16Gi",'
                '"kubernetes.io/gpu-memory-ratio":"100"}}]}'
            ),
        ],
        'pod': {
            'metadata': {'namespace': 'default', 'name': 'test-pod', 'uid': 'uid-test-pod'},
            'spec': {'containers': [{'name': 'main', 'resources': {'requests': {'kubernetes.io/gpu': '100'}}}]},
        },
        'scored': False,
        'strategy': 'LeastAllocated',
        'expect': (
            '{"gpu":[{"minor":1,"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"16Gi",'
            '"koordinator.sh/gpu-memory-ratio":"100"},"id":"GPU-11111111-1111-1111-1111-111111111111"}]}'
        ),
        'fail': None,
        'note': (
            "the scheduler's informer transformers rename kubernetes.io/gpu* in pod requests and in "
            'device-allocated annotations'
        ),
    },
    {
        'name': 'derived: gpu.shared over two cards on a topology node',
        'source': 'pkg/scheduler/plugins/deviceshare/allocator_gpu.go',
        'device': FAKE_DEVICE_CR,
        'node': {'metadata': {'name': 'test-node-1'}},
        'assigned': [],
        'pod': {
            'metadata': {'namespace': 'default', 'name': 'test-pod', 'uid': 'uid-test-pod'},
            'spec': {
                'containers': [
                    {
                        'name': 'main',
                        'resources': {
                            'requests': {
                                'koordinator.sh/gpu.shared': '2',
                                'koordinator.sh/gpu-core': '100',
                                'koordinator.sh/gpu-memory-ratio': '100',
                            },
                        },
                    },
                ],
            },
        },
        'scored': False,
        'strategy': 'LeastAllocated',
        'expect': (
            '{"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":"50",'
            '"koordinator.sh/gpu-memory":"41600608Ki","koordinator.sh/gpu-memory-ratio":"50"},'
            '"id":"GPU-8c25ea37-2909-6e62-b7bf-e2fcadebea8d"},{"minor":1,'
            '"resources":{"koordinator.sh/gpu-core":"50","koordinator.sh/gpu-memory":"41600608Ki",'
            '"koordinator.sh/gpu-memory-ratio":"50"},"id":"GPU-befd76c3-8a36-7b8a-179c-eae75aa7d9f2"}]}'
        ),
        'fail': None,
        'note': (
            'a multi-card shared request makes the topology stage unresolvable, swallowed without a required scope; '
            'the default allocator takes minors 0 and 1'
        ),
    },
    {
        'name': 'derived: gpu.shared over two cards with a required scope',
        'source': 'pkg/scheduler/plugins/deviceshare/allocator_gpu.go',
        'device': FAKE_DEVICE_CR,
        'node': {'metadata': {'name': 'test-node-1'}},
        'assigned': [],
        'pod': {
            'metadata': {
                'namespace': 'default',
                'name': 'test-pod',
                'uid': 'uid-test-pod',
                'annotations': {
                    'scheduling.koordinator.sh/device-allocate-hint': '{"gpu":{"requiredTopologyScope":"PCIe"}}',
                },
            },
            'spec': {
                'containers': [
                    {
                        'name': 'main',
                        'resources': {
                            'requests': {
                                'koordinator.sh/gpu.shared': '2',
                                'koordinator.sh/gpu-core': '100',
                                'koordinator.sh/gpu-memory-ratio': '100',
                            },
                        },
                    },
                ],
            },
        },
        'scored': False,
        'strategy': 'LeastAllocated',
        'expect': None,
        'fail': {'reason': 'node(s) Unsupported Multi-Shared GPU', 'unresolvable': True},
        'note': "with a required scope the topology stage's unresolvable status is returned",
    },
    {
        'name': 'derived: init containers take the max',
        'source': 'k8s.io/component-helpers/resource PodRequests',
        'device': FAKE_DEVICE_CR,
        'node': {'metadata': {'name': 'test-node-1'}},
        'assigned': [],
        'pod': {
            'metadata': {'namespace': 'default', 'name': 'test-pod', 'uid': 'uid-test-pod'},
            'spec': {
                'containers': [
                    {'name': 'a', 'resources': {'requests': {'nvidia.com/gpu': '1'}}},
                    {'name': 'b', 'resources': {'requests': {'nvidia.com/gpu': '1'}}},
                ],
                'initContainers': [{'name': 'init', 'resources': {'requests': {'nvidia.com/gpu': '3'}}}],
            },
        },
        'scored': False,
        'strategy': 'LeastAllocated',
        'expect': (
            '{"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":"100",'
            '"koordinator.sh/gpu-memory":"83201216Ki","koordinator.sh/gpu-memory-ratio":"100"},'
            '"id":"GPU-8c25ea37-2909-6e62-b7bf-e2fcadebea8d"},{"minor":1,'
            '"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"83201216Ki",'
            '"koordinator.sh/gpu-memory-ratio":"100"},"id":"GPU-befd76c3-8a36-7b8a-179c-eae75aa7d9f2"},{"minor":2,'
            '"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"83201216Ki",'
            '"koordinator.sh/gpu-memory-ratio":"100"},"id":"GPU-87a9047b-dade-e08c-c067-7fedfd2e2750"}]}'
        ),
        'fail': None,
        'note': 'containers sum to 2, the init container asks 3: 3 cards, on NUMA node 0',
    },
    {
        'name': 'derived: whole NICs',
        'source': 'pkg/scheduler/plugins/deviceshare/devicehandler_default.go',
        'device': FAKE_DEVICE_CR,
        'node': {'metadata': {'name': 'test-node-1'}},
        'assigned': [],
        'pod': {
            'metadata': {'namespace': 'default', 'name': 'test-pod', 'uid': 'uid-test-pod'},
            'spec': {'containers': [{'name': 'main', 'resources': {'requests': {'koordinator.sh/rdma': '200'}}}]},
        },
        'scored': False,
        'strategy': 'LeastAllocated',
        'expect': (
            '{"rdma":[{"minor":1,"resources":{"koordinator.sh/rdma":"100"},"id":"0000:1f:00.0"},{"minor":2,'
            '"resources":{"koordinator.sh/rdma":"100"},"id":"0000:90:00.0"}]}'
        ),
        'fail': None,
        'note': 'rdma 200 = 2 NICs of 100, no VF without a vfSelector',
    },
    {
        'name': 'derived: RequestsAsCount with an empty vfSelector',
        'source': 'pkg/scheduler/plugins/deviceshare/devicehandler_default.go',
        'device': FAKE_DEVICE_CR,
        'node': {'metadata': {'name': 'test-node-1'}},
        'assigned': [],
        'pod': {
            'metadata': {
                'namespace': 'default',
                'name': 'test-pod',
                'uid': 'uid-test-pod',
                'annotations': {
                    'scheduling.koordinator.sh/device-allocate-hint': (
                        '{"rdma":{"vfSelector":{},"allocateStrategy":"RequestsAsCount"}}'
                    ),
                },
            },
            'spec': {'containers': [{'name': 'main', 'resources': {'requests': {'koordinator.sh/rdma': '2'}}}]},
        },
        'scored': False,
        'strategy': 'LeastAllocated',
        'expect': (
            '{"rdma":[{"minor":1,"resources":{"koordinator.sh/rdma":"1"},"id":"0000:1f:00.0",'
            '"extension":{"vfs":[{"busID":"0000:1f:00.2"}]}},{"minor":2,"resources":{"koordinator.sh/rdma":"1"},'
            '"id":"0000:90:00.0","extension":{"vfs":[{"busID":"0000:90:00.2"}]}}]}'
        ),
        'fail': None,
        'note': 'an empty vfSelector matches every VF group and forces a VF per NIC',
    },
    {
        'name': 'derived: SamePCIe when a GPU switch has no usable NIC',
        'source': 'pkg/scheduler/plugins/deviceshare/device_allocator.go',
        'device': CR_ONE_VF_NIC_4_PCIE,
        'node': {'metadata': {'name': 'test-node-1'}},
        'assigned': [],
        'pod': {
            'metadata': {
                'namespace': 'default',
                'name': 'test-pod',
                'uid': 'uid-test-pod',
                'annotations': {
                    'scheduling.koordinator.sh/device-allocate-hint': (
                        '{"rdma":{"selector":{"matchLabels":{"type":"fakeW"}},'
                        '"vfSelector":{"matchExpressions":[{"key":"type","operator":"In","values":["general",'
                        '"fakeG"]}]}}}'
                    ),
                    'scheduling.koordinator.sh/device-joint-allocate': (
                        '{"deviceTypes":["gpu","rdma"],"requiredScope":"SamePCIe"}'
                    ),
                },
            },
            'spec': {
                'containers': [
                    {'name': 'main', 'resources': {'requests': {'nvidia.com/gpu': '4', 'koordinator.sh/rdma': '1'}}},
                ],
            },
        },
        'scored': False,
        'strategy': 'LeastAllocated',
        'expect': None,
        'fail': {'reason': 'Insufficient rdma devices', 'unresolvable': False},
        'note': (
            'the GPUs sit on switches 0 and 1, SamePCIe wants 2 NICs, only NIC 1 has a VF: the secondary allocation '
            'itself fails before the PCIe check'
        ),
    },
    {
        'name': 'derived: secondary device well planned, scored (Reserve)',
        'source': 'pkg/scheduler/plugins/deviceshare/device_allocator.go',
        'device': FAKE_DEVICE_CR_WELL_PLANNED,
        'node': {'metadata': {'name': 'test-node-1'}},
        'assigned': [],
        'pod': {
            'metadata': {
                'namespace': 'default',
                'name': 'test-pod',
                'uid': 'uid-test-pod',
                'annotations': {
                    'scheduling.koordinator.sh/device-allocate-hint': (
                        '{"rdma":{"selector":{"matchLabels":{"type":"fakeW"}},'
                        '"vfSelector":{"matchExpressions":[{"key":"type","operator":"In","values":["general",'
                        '"fakeG"]}]}}}'
                    ),
                    'scheduling.koordinator.sh/device-joint-allocate': '{"deviceTypes":["gpu","rdma"]}',
                },
            },
            'spec': {
                'containers': [
                    {'name': 'main', 'resources': {'requests': {'koordinator.sh/rdma': '1', 'nvidia.com/gpu': '8'}}},
                ],
            },
        },
        'scored': True,
        'strategy': 'LeastAllocated',
        'expect': (
            '{"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":"100",'
            '"koordinator.sh/gpu-memory":"83201216Ki","koordinator.sh/gpu-memory-ratio":"100"},'
            '"id":"GPU-8c25ea37-2909-6e62-b7bf-e2fcadebea8d"},{"minor":1,'
            '"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"83201216Ki",'
            '"koordinator.sh/gpu-memory-ratio":"100"},"id":"GPU-befd76c3-8a36-7b8a-179c-eae75aa7d9f2"},{"minor":2,'
            '"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"83201216Ki",'
            '"koordinator.sh/gpu-memory-ratio":"100"},"id":"GPU-87a9047b-dade-e08c-c067-7fedfd2e2750"},{"minor":3,'
            '"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"83201216Ki",'
            '"koordinator.sh/gpu-memory-ratio":"100"},"id":"GPU-44a68f77-c18d-85a6-5425-e314c0e8e182"},{"minor":4,'
            '"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"83201216Ki",'
            '"koordinator.sh/gpu-memory-ratio":"100"},"id":"GPU-ac53dc25-2cb7-a11d-417f-ce23331dcea0"},{"minor":5,'
            '"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"83201216Ki",'
            '"koordinator.sh/gpu-memory-ratio":"100"},"id":"GPU-3908dbfd-6e0b-013d-549b-fca246a16fa0"},{"minor":6,'
            '"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"83201216Ki",'
            '"koordinator.sh/gpu-memory-ratio":"100"},"id":"GPU-7a87e98a-a1a7-28bc-c880-28c870bf0c7d"},{"minor":7,'
            '"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"83201216Ki",'
            '"koordinator.sh/gpu-memory-ratio":"100"},"id":"GPU-c3b7de0e-8a41-9bdb-3f71-8175c3438890"}],'
            '"rdma":[{"minor":1,"resources":{"koordinator.sh/rdma":"1"},"id":"0000:1f:00.0",'
            '"extension":{"vfs":[{"busID":"0000:1f:00.2"}]}},{"minor":2,"resources":{"koordinator.sh/rdma":"1"},'
            '"id":"0000:90:00.0","extension":{"vfs":[{"busID":"0000:90:00.2"}]}},{"minor":3,'
            '"resources":{"koordinator.sh/rdma":"1"},"id":"0000:51:00.0",'
            '"extension":{"vfs":[{"busID":"0000:51:00.2"}]}},{"minor":4,"resources":{"koordinator.sh/rdma":"1"},'
            '"id":"0000:b9:00.0","extension":{"vfs":[{"busID":"0000:b9:00.2"}]}}]}'
        ),
        'fail': None,
        'note': (
            "Reserve allocates the secondary type that the Filter trial skips (TestAutopilotAllocator 'secondary "
            "device well planned' is the Filter side)"
        ),
    },
    {
        'name': 'Test_Plugin_Filter/error missing nodecache',
        'source': 'pkg/scheduler/plugins/deviceshare/plugin.go',
        'device': None,
        'node': None,
        'assigned': [],
        'pod': {
            'metadata': {'namespace': 'default', 'name': 'test-pod', 'uid': 'uid-test-pod'},
            'spec': {
                'containers': [
                    {
                        'name': 'main',
                        'resources': {
                            'requests': {'koordinator.sh/gpu-core': '100', 'koordinator.sh/gpu-memory-ratio': '100'},
                        },
                    },
                ],
            },
        },
        'scored': False,
        'strategy': 'LeastAllocated',
        'expect': '',
        'fail': None,
        'note': (
            "no Device CR for the node: upstream's Filter passes and Reserve/PreBind write nothing (getNodeDevice "
            "returns nil); expect '' = no failure and no annotation. Upstream's Reserve test 'error missing node "
            "cache' agrees"
        ),
    },
]
