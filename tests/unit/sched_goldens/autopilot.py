"""Golden cases from device_allocator_test.go: TestAutopilotAllocator,
TestAutopilotAllocatorWithExclusivePolicyAndRequiredScope and the scorer / unhealthy-card
tests (GPU + RDMA/VF joint allocation, topology, scoring)."""

from tests.unit.sched_goldens.fixtures import (
    CR_2_NICS_PER_PCIE,
    CR_2_NUMA_4_PCIE,
    CR_3_NICS_ON_FIRST_PCIE,
    CR_4_PCIE_1_NIC_EACH,
    CR_NICS_WITHOUT_VFS,
    CR_ONE_VF_NIC_4_PCIE,
    FAKE_DEVICE_CR,
    FAKE_DEVICE_CR_WELL_PLANNED,
    FAKE_DEVICE_CR_WITHOUT_TOPOLOGY,
)

# CASES: list of dicts. name: upstream test / case name ('derived: ...' for code-derived ones); source: upstream
# file; device: the node's Device CR (None: no CR); node: the Node object or None; assigned: device-allocated
# annotations of pods already on the node; pod: the incoming pod; scored/strategy (and weights, when not the
# defaults): Filter trial (unscored) or Reserve (scored with that strategy); expect: the exact device-allocated value
# ('' = no device request / nothing written); fail: {reason | reason_any_of, unresolvable}; note: how the expectation
# was derived (upstream compares structs sorted by minor; the strings are what PreBind's json.Marshal writes).

CASES = [
    {
        'name': 'TestAutopilotAllocator/request 1 GPU and 1 VF but invalid Device Topology',
        'source': 'pkg/scheduler/plugins/deviceshare/device_allocator_test.go',
        'device': FAKE_DEVICE_CR_WITHOUT_TOPOLOGY,
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
                    {'name': 'main', 'resources': {'requests': {'koordinator.sh/rdma': '1', 'nvidia.com/gpu': '1'}}},
                ],
            },
        },
        'scored': False,
        'strategy': 'LeastAllocated',
        'expect': None,
        'fail': {'reason': 'Insufficient rdma VirtualFunctions', 'unresolvable': True},
        'note': 'the vfSelector hint needs VFs and this CR has none (AutopilotAllocator.Prepare)',
    },
    {
        'name': 'TestAutopilotAllocator/allocate 0 GPU and 1 VF but invalid Device Topology',
        'source': 'pkg/scheduler/plugins/deviceshare/device_allocator_test.go',
        'device': FAKE_DEVICE_CR_WITHOUT_TOPOLOGY,
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
                        '"fakeC"]}]}}}'
                    ),
                },
            },
            'spec': {'containers': [{'name': 'main', 'resources': {'requests': {'koordinator.sh/rdma': '1'}}}]},
        },
        'scored': False,
        'strategy': 'LeastAllocated',
        'expect': None,
        'fail': {'reason': 'Insufficient rdma VirtualFunctions', 'unresolvable': True},
    },
    {
        'name': 'TestAutopilotAllocator/allocate 0 GPU and 1 VF',
        'source': 'pkg/scheduler/plugins/deviceshare/device_allocator_test.go',
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
                        '{"rdma":{"selector":{"matchLabels":{"type":"fakeW"}},'
                        '"vfSelector":{"matchExpressions":[{"key":"type","operator":"In","values":["general",'
                        '"fakeC"]}]}}}'
                    ),
                },
            },
            'spec': {'containers': [{'name': 'main', 'resources': {'requests': {'koordinator.sh/rdma': '1'}}}]},
        },
        'scored': False,
        'strategy': 'LeastAllocated',
        'expect': (
            '{"rdma":[{"minor":1,"resources":{"koordinator.sh/rdma":"1"},"id":"0000:1f:00.0",'
            '"extension":{"vfs":[{"busID":"0000:1f:00.2"}]}}]}'
        ),
        'fail': None,
        'note': (
            "upstream compares structs (sorted by minor); the string is what PreBind's json.Marshal writes for the "
            'same allocations in allocation order, with ids from the CR'
        ),
    },
    {
        'name': 'TestAutopilotAllocator/allocate 1 GPU and 1 VF',
        'source': 'pkg/scheduler/plugins/deviceshare/device_allocator_test.go',
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
                        '{"rdma":{"selector":{"matchLabels":{"type":"fakeW"}},'
                        '"vfSelector":{"matchExpressions":[{"key":"type","operator":"In","values":["general",'
                        '"fakeG"]}]}}}'
                    ),
                    'scheduling.koordinator.sh/device-joint-allocate': '{"deviceTypes":["gpu","rdma"]}',
                },
            },
            'spec': {
                'containers': [
                    {'name': 'main', 'resources': {'requests': {'koordinator.sh/rdma': '1', 'nvidia.com/gpu': '1'}}},
                ],
            },
        },
        'scored': False,
        'strategy': 'LeastAllocated',
        'expect': (
            '{"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":"100",'
            '"koordinator.sh/gpu-memory":"83201216Ki","koordinator.sh/gpu-memory-ratio":"100"},'
            '"id":"GPU-8c25ea37-2909-6e62-b7bf-e2fcadebea8d"}],"rdma":[{"minor":1,'
            '"resources":{"koordinator.sh/rdma":"1"},"id":"0000:1f:00.0",'
            '"extension":{"vfs":[{"busID":"0000:1f:00.2"}]}}]}'
        ),
        'fail': None,
        'note': (
            "upstream compares structs (sorted by minor); the string is what PreBind's json.Marshal writes for the "
            'same allocations in allocation order, with ids from the CR'
        ),
    },
    {
        'name': 'TestAutopilotAllocator/allocate 2 GPU and 1 VF',
        'source': 'pkg/scheduler/plugins/deviceshare/device_allocator_test.go',
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
                        '{"rdma":{"selector":{"matchLabels":{"type":"fakeW"}},'
                        '"vfSelector":{"matchExpressions":[{"key":"type","operator":"In","values":["general",'
                        '"fakeG"]}]}}}'
                    ),
                    'scheduling.koordinator.sh/device-joint-allocate': '{"deviceTypes":["gpu","rdma"]}',
                },
            },
            'spec': {
                'containers': [
                    {'name': 'main', 'resources': {'requests': {'koordinator.sh/rdma': '1', 'nvidia.com/gpu': '2'}}},
                ],
            },
        },
        'scored': False,
        'strategy': 'LeastAllocated',
        'expect': (
            '{"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":"100",'
            '"koordinator.sh/gpu-memory":"83201216Ki","koordinator.sh/gpu-memory-ratio":"100"},'
            '"id":"GPU-8c25ea37-2909-6e62-b7bf-e2fcadebea8d"},{"minor":1,'
            '"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"83201216Ki",'
            '"koordinator.sh/gpu-memory-ratio":"100"},"id":"GPU-befd76c3-8a36-7b8a-179c-eae75aa7d9f2"}],'
            '"rdma":[{"minor":1,"resources":{"koordinator.sh/rdma":"1"},"id":"0000:1f:00.0",'
            '"extension":{"vfs":[{"busID":"0000:1f:00.2"}]}}]}'
        ),
        'fail': None,
        'note': (
            "upstream compares structs (sorted by minor); the string is what PreBind's json.Marshal writes for the "
            'same allocations in allocation order, with ids from the CR'
        ),
    },
    {
        'name': 'TestAutopilotAllocator/allocate 3 GPU and 2 VF',
        'source': 'pkg/scheduler/plugins/deviceshare/device_allocator_test.go',
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
                        '{"rdma":{"selector":{"matchLabels":{"type":"fakeW"}},'
                        '"vfSelector":{"matchExpressions":[{"key":"type","operator":"In","values":["general",'
                        '"fakeG"]}]}}}'
                    ),
                    'scheduling.koordinator.sh/device-joint-allocate': '{"deviceTypes":["gpu","rdma"]}',
                },
            },
            'spec': {
                'containers': [
                    {'name': 'main', 'resources': {'requests': {'koordinator.sh/rdma': '1', 'nvidia.com/gpu': '3'}}},
                ],
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
            '"koordinator.sh/gpu-memory-ratio":"100"},"id":"GPU-87a9047b-dade-e08c-c067-7fedfd2e2750"}],'
            '"rdma":[{"minor":1,"resources":{"koordinator.sh/rdma":"1"},"id":"0000:1f:00.0",'
            '"extension":{"vfs":[{"busID":"0000:1f:00.2"}]}},{"minor":2,"resources":{"koordinator.sh/rdma":"1"},'
            '"id":"0000:90:00.0","extension":{"vfs":[{"busID":"0000:90:00.2"}]}}]}'
        ),
        'fail': None,
        'note': (
            "upstream compares structs (sorted by minor); the string is what PreBind's json.Marshal writes for the "
            'same allocations in allocation order, with ids from the CR'
        ),
    },
    {
        'name': 'TestAutopilotAllocator/allocate 4 GPU and 2 VF',
        'source': 'pkg/scheduler/plugins/deviceshare/device_allocator_test.go',
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
                        '{"rdma":{"selector":{"matchLabels":{"type":"fakeW"}},'
                        '"vfSelector":{"matchExpressions":[{"key":"type","operator":"In","values":["general",'
                        '"fakeG"]}]}}}'
                    ),
                    'scheduling.koordinator.sh/device-joint-allocate': '{"deviceTypes":["gpu","rdma"]}',
                },
            },
            'spec': {
                'containers': [
                    {'name': 'main', 'resources': {'requests': {'koordinator.sh/rdma': '1', 'nvidia.com/gpu': '4'}}},
                ],
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
            '"koordinator.sh/gpu-memory-ratio":"100"},"id":"GPU-87a9047b-dade-e08c-c067-7fedfd2e2750"},{"minor":3,'
            '"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"83201216Ki",'
            '"koordinator.sh/gpu-memory-ratio":"100"},"id":"GPU-44a68f77-c18d-85a6-5425-e314c0e8e182"}],'
            '"rdma":[{"minor":1,"resources":{"koordinator.sh/rdma":"1"},"id":"0000:1f:00.0",'
            '"extension":{"vfs":[{"busID":"0000:1f:00.2"}]}},{"minor":2,"resources":{"koordinator.sh/rdma":"1"},'
            '"id":"0000:90:00.0","extension":{"vfs":[{"busID":"0000:90:00.2"}]}}]}'
        ),
        'fail': None,
        'note': (
            "upstream compares structs (sorted by minor); the string is what PreBind's json.Marshal writes for the "
            'same allocations in allocation order, with ids from the CR'
        ),
    },
    {
        'name': 'TestAutopilotAllocator/allocate 6 GPU and 3 VF',
        'source': 'pkg/scheduler/plugins/deviceshare/device_allocator_test.go',
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
                        '{"rdma":{"selector":{"matchLabels":{"type":"fakeW"}},'
                        '"vfSelector":{"matchExpressions":[{"key":"type","operator":"In","values":["general",'
                        '"fakeG"]}]}}}'
                    ),
                    'scheduling.koordinator.sh/device-joint-allocate': '{"deviceTypes":["gpu","rdma"]}',
                },
            },
            'spec': {
                'containers': [
                    {'name': 'main', 'resources': {'requests': {'koordinator.sh/rdma': '1', 'nvidia.com/gpu': '6'}}},
                ],
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
            '"koordinator.sh/gpu-memory-ratio":"100"},"id":"GPU-87a9047b-dade-e08c-c067-7fedfd2e2750"},{"minor":3,'
            '"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"83201216Ki",'
            '"koordinator.sh/gpu-memory-ratio":"100"},"id":"GPU-44a68f77-c18d-85a6-5425-e314c0e8e182"},{"minor":4,'
            '"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"83201216Ki",'
            '"koordinator.sh/gpu-memory-ratio":"100"},"id":"GPU-ac53dc25-2cb7-a11d-417f-ce23331dcea0"},{"minor":5,'
            '"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"83201216Ki",'
            '"koordinator.sh/gpu-memory-ratio":"100"},"id":"GPU-3908dbfd-6e0b-013d-549b-fca246a16fa0"}],'
            '"rdma":[{"minor":1,"resources":{"koordinator.sh/rdma":"1"},"id":"0000:1f:00.0",'
            '"extension":{"vfs":[{"busID":"0000:1f:00.2"}]}},{"minor":2,"resources":{"koordinator.sh/rdma":"1"},'
            '"id":"0000:90:00.0","extension":{"vfs":[{"busID":"0000:90:00.2"}]}},{"minor":3,'
            '"resources":{"koordinator.sh/rdma":"1"},"id":"0000:51:00.0",'
            '"extension":{"vfs":[{"busID":"0000:51:00.2"}]}}]}'
        ),
        'fail': None,
        'note': (
            "upstream compares structs (sorted by minor); the string is what PreBind's json.Marshal writes for the "
            'same allocations in allocation order, with ids from the CR'
        ),
    },
    {
        'name': 'TestAutopilotAllocator/allocate 8 GPU and 4 VF',
        'source': 'pkg/scheduler/plugins/deviceshare/device_allocator_test.go',
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
        'scored': False,
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
            "upstream compares structs (sorted by minor); the string is what PreBind's json.Marshal writes for the "
            'same allocations in allocation order, with ids from the CR'
        ),
    },
    {
        'name': 'TestAutopilotAllocator/allocate 2 GPU and 1 VF with assigned devices',
        'source': 'pkg/scheduler/plugins/deviceshare/device_allocator_test.go',
        'device': FAKE_DEVICE_CR,
        'node': {'metadata': {'name': 'test-node-1'}},
        'assigned': [
            (
                '{"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":"100",'
                '"koordinator.sh/gpu-memory":"83201216Ki","koordinator.sh/gpu-memory-ratio":"100"}}],'
                '"rdma":[{"minor":1,"resources":{"koordinator.sh/rdma":"1"},'
                '"extension":{"vfs":[{"busID":"0000:1f:00.2"}]}}]}'
            ),
        ],
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
                    {'name': 'main', 'resources': {'requests': {'koordinator.sh/rdma': '1', 'nvidia.com/gpu': '2'}}},
                ],
            },
        },
        'scored': False,
        'strategy': 'LeastAllocated',
        'expect': (
            '{"gpu":[{"minor":2,"resources":{"koordinator.sh/gpu-core":"100",'
            '"koordinator.sh/gpu-memory":"83201216Ki","koordinator.sh/gpu-memory-ratio":"100"},'
            '"id":"GPU-87a9047b-dade-e08c-c067-7fedfd2e2750"},{"minor":3,'
            '"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"83201216Ki",'
            '"koordinator.sh/gpu-memory-ratio":"100"},"id":"GPU-44a68f77-c18d-85a6-5425-e314c0e8e182"}],'
            '"rdma":[{"minor":2,"resources":{"koordinator.sh/rdma":"1"},"id":"0000:90:00.0",'
            '"extension":{"vfs":[{"busID":"0000:90:00.2"}]}}]}'
        ),
        'fail': None,
        'note': (
            "upstream compares structs (sorted by minor); the string is what PreBind's json.Marshal writes for the "
            'same allocations in allocation order, with ids from the CR; the switch with a used card cannot hold 2'
        ),
    },
    {
        'name': 'TestAutopilotAllocator/allocate 3 GPU and 2 VF with assigned devices',
        'source': 'pkg/scheduler/plugins/deviceshare/device_allocator_test.go',
        'device': FAKE_DEVICE_CR,
        'node': {'metadata': {'name': 'test-node-1'}},
        'assigned': [
            (
                '{"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":"100",'
                '"koordinator.sh/gpu-memory":"83201216Ki","koordinator.sh/gpu-memory-ratio":"100"}}],'
                '"rdma":[{"minor":1,"resources":{"koordinator.sh/rdma":"1"},'
                '"extension":{"vfs":[{"busID":"0000:1f:00.2"}]}}]}'
            ),
        ],
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
                    {'name': 'main', 'resources': {'requests': {'koordinator.sh/rdma': '1', 'nvidia.com/gpu': '3'}}},
                ],
            },
        },
        'scored': False,
        'strategy': 'LeastAllocated',
        'expect': (
            '{"gpu":[{"minor":1,"resources":{"koordinator.sh/gpu-core":"100",'
            '"koordinator.sh/gpu-memory":"83201216Ki","koordinator.sh/gpu-memory-ratio":"100"},'
            '"id":"GPU-befd76c3-8a36-7b8a-179c-eae75aa7d9f2"},{"minor":2,'
            '"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"83201216Ki",'
            '"koordinator.sh/gpu-memory-ratio":"100"},"id":"GPU-87a9047b-dade-e08c-c067-7fedfd2e2750"},{"minor":3,'
            '"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"83201216Ki",'
            '"koordinator.sh/gpu-memory-ratio":"100"},"id":"GPU-44a68f77-c18d-85a6-5425-e314c0e8e182"}],'
            '"rdma":[{"minor":1,"resources":{"koordinator.sh/rdma":"1"},"id":"0000:1f:00.0",'
            '"extension":{"vfs":[{"minor":1,"busID":"0000:1f:00.3"}]}},{"minor":2,'
            '"resources":{"koordinator.sh/rdma":"1"},"id":"0000:90:00.0",'
            '"extension":{"vfs":[{"busID":"0000:90:00.2"}]}}]}'
        ),
        'fail': None,
        'note': (
            "upstream compares structs (sorted by minor); the string is what PreBind's json.Marshal writes for the "
            "same allocations in allocation order, with ids from the CR; NIC 1's first VF is taken, so the next bus "
            'id'
        ),
    },
    {
        'name': 'TestAutopilotAllocatorWithExclusivePolicyAndRequiredScope/allocate 0 GPU and 1 VF',
        'source': 'pkg/scheduler/plugins/deviceshare/device_allocator_test.go',
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
                        '{"rdma":{"selector":{"matchLabels":{"type":"fakeW"}},'
                        '"vfSelector":{"matchExpressions":[{"key":"type","operator":"In","values":["general",'
                        '"fakeC"]}]},"exclusivePolicy":"PCIeLevel"}}'
                    ),
                },
            },
            'spec': {'containers': [{'name': 'main', 'resources': {'requests': {'koordinator.sh/rdma': '1'}}}]},
        },
        'scored': False,
        'strategy': 'LeastAllocated',
        'expect': (
            '{"rdma":[{"minor":1,"resources":{"koordinator.sh/rdma":"1"},"id":"0000:1f:00.0",'
            '"extension":{"vfs":[{"busID":"0000:1f:00.2"}]}}]}'
        ),
        'fail': None,
        'note': (
            "upstream compares structs (sorted by minor); the string is what PreBind's json.Marshal writes for the "
            'same allocations in allocation order, with ids from the CR'
        ),
    },
    {
        'name': 'TestAutopilotAllocatorWithExclusivePolicyAndRequiredScope/allocate 1 GPU and 1 VF',
        'source': 'pkg/scheduler/plugins/deviceshare/device_allocator_test.go',
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
                        '{"gpu":{"exclusivePolicy":"PCIeLevel"},"rdma":{"selector":{"matchLabels":{"type":"fakeW"}},'
                        '"vfSelector":{"matchExpressions":[{"key":"type","operator":"In","values":["general",'
                        '"fakeG"]}]},"exclusivePolicy":"PCIeLevel"}}'
                    ),
                    'scheduling.koordinator.sh/device-joint-allocate': (
                        '{"deviceTypes":["gpu","rdma"],"requiredScope":"SamePCIe"}'
                    ),
                },
            },
            'spec': {
                'containers': [
                    {'name': 'main', 'resources': {'requests': {'koordinator.sh/rdma': '1', 'nvidia.com/gpu': '1'}}},
                ],
            },
        },
        'scored': False,
        'strategy': 'LeastAllocated',
        'expect': (
            '{"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":"100",'
            '"koordinator.sh/gpu-memory":"83201216Ki","koordinator.sh/gpu-memory-ratio":"100"},'
            '"id":"GPU-8c25ea37-2909-6e62-b7bf-e2fcadebea8d"}],"rdma":[{"minor":1,'
            '"resources":{"koordinator.sh/rdma":"1"},"id":"0000:1f:00.0",'
            '"extension":{"vfs":[{"busID":"0000:1f:00.2"}]}}]}'
        ),
        'fail': None,
        'note': (
            "upstream compares structs (sorted by minor); the string is what PreBind's json.Marshal writes for the "
            'same allocations in allocation order, with ids from the CR'
        ),
    },
    {
        'name': 'TestAutopilotAllocatorWithExclusivePolicyAndRequiredScope/allocate 2 GPU and 1 VF',
        'source': 'pkg/scheduler/plugins/deviceshare/device_allocator_test.go',
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
                        '{"gpu":{"exclusivePolicy":"PCIeLevel"},"rdma":{"selector":{"matchLabels":{"type":"fakeW"}},'
                        '"vfSelector":{"matchExpressions":[{"key":"type","operator":"In","values":["general",'
                        '"fakeG"]}]},"exclusivePolicy":"PCIeLevel"}}'
                    ),
                    'scheduling.koordinator.sh/device-joint-allocate': (
                        '{"deviceTypes":["gpu","rdma"],"requiredScope":"SamePCIe"}'
                    ),
                },
            },
            'spec': {
                'containers': [
                    {'name': 'main', 'resources': {'requests': {'koordinator.sh/rdma': '1', 'nvidia.com/gpu': '2'}}},
                ],
            },
        },
        'scored': False,
        'strategy': 'LeastAllocated',
        'expect': (
            '{"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":"100",'
            '"koordinator.sh/gpu-memory":"83201216Ki","koordinator.sh/gpu-memory-ratio":"100"},'
            '"id":"GPU-8c25ea37-2909-6e62-b7bf-e2fcadebea8d"},{"minor":1,'
            '"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"83201216Ki",'
            '"koordinator.sh/gpu-memory-ratio":"100"},"id":"GPU-befd76c3-8a36-7b8a-179c-eae75aa7d9f2"}],'
            '"rdma":[{"minor":1,"resources":{"koordinator.sh/rdma":"1"},"id":"0000:1f:00.0",'
            '"extension":{"vfs":[{"busID":"0000:1f:00.2"}]}}]}'
        ),
        'fail': None,
        'note': (
            "upstream compares structs (sorted by minor); the string is what PreBind's json.Marshal writes for the "
            'same allocations in allocation order, with ids from the CR'
        ),
    },
    {
        'name': 'TestAutopilotAllocatorWithExclusivePolicyAndRequiredScope/allocate 3 GPU and 2 VF',
        'source': 'pkg/scheduler/plugins/deviceshare/device_allocator_test.go',
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
                        '{"gpu":{"exclusivePolicy":"PCIeLevel"},"rdma":{"selector":{"matchLabels":{"type":"fakeW"}},'
                        '"vfSelector":{"matchExpressions":[{"key":"type","operator":"In","values":["general",'
                        '"fakeG"]}]},"exclusivePolicy":"PCIeLevel"}}'
                    ),
                    'scheduling.koordinator.sh/device-joint-allocate': (
                        '{"deviceTypes":["gpu","rdma"],"requiredScope":"SamePCIe"}'
                    ),
                },
            },
            'spec': {
                'containers': [
                    {'name': 'main', 'resources': {'requests': {'koordinator.sh/rdma': '1', 'nvidia.com/gpu': '3'}}},
                ],
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
            '"koordinator.sh/gpu-memory-ratio":"100"},"id":"GPU-87a9047b-dade-e08c-c067-7fedfd2e2750"}],'
            '"rdma":[{"minor":1,"resources":{"koordinator.sh/rdma":"1"},"id":"0000:1f:00.0",'
            '"extension":{"vfs":[{"busID":"0000:1f:00.2"}]}},{"minor":2,"resources":{"koordinator.sh/rdma":"1"},'
            '"id":"0000:90:00.0","extension":{"vfs":[{"busID":"0000:90:00.2"}]}}]}'
        ),
        'fail': None,
        'note': (
            "upstream compares structs (sorted by minor); the string is what PreBind's json.Marshal writes for the "
            'same allocations in allocation order, with ids from the CR'
        ),
    },
    {
        'name': 'TestAutopilotAllocatorWithExclusivePolicyAndRequiredScope/allocate 4 GPU and 2 VF',
        'source': 'pkg/scheduler/plugins/deviceshare/device_allocator_test.go',
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
                        '{"gpu":{"exclusivePolicy":"PCIeLevel"},"rdma":{"selector":{"matchLabels":{"type":"fakeW"}},'
                        '"vfSelector":{"matchExpressions":[{"key":"type","operator":"In","values":["general",'
                        '"fakeG"]}]},"exclusivePolicy":"PCIeLevel"}}'
                    ),
                    'scheduling.koordinator.sh/device-joint-allocate': (
                        '{"deviceTypes":["gpu","rdma"],"requiredScope":"SamePCIe"}'
                    ),
                },
            },
            'spec': {
                'containers': [
                    {'name': 'main', 'resources': {'requests': {'koordinator.sh/rdma': '1', 'nvidia.com/gpu': '4'}}},
                ],
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
            '"koordinator.sh/gpu-memory-ratio":"100"},"id":"GPU-87a9047b-dade-e08c-c067-7fedfd2e2750"},{"minor":3,'
            '"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"83201216Ki",'
            '"koordinator.sh/gpu-memory-ratio":"100"},"id":"GPU-44a68f77-c18d-85a6-5425-e314c0e8e182"}],'
            '"rdma":[{"minor":1,"resources":{"koordinator.sh/rdma":"1"},"id":"0000:1f:00.0",'
            '"extension":{"vfs":[{"busID":"0000:1f:00.2"}]}},{"minor":2,"resources":{"koordinator.sh/rdma":"1"},'
            '"id":"0000:90:00.0","extension":{"vfs":[{"busID":"0000:90:00.2"}]}}]}'
        ),
        'fail': None,
        'note': (
            "upstream compares structs (sorted by minor); the string is what PreBind's json.Marshal writes for the "
            'same allocations in allocation order, with ids from the CR'
        ),
    },
    {
        'name': 'TestAutopilotAllocatorWithExclusivePolicyAndRequiredScope/allocate 6 GPU and 3 VF',
        'source': 'pkg/scheduler/plugins/deviceshare/device_allocator_test.go',
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
                        '{"gpu":{"exclusivePolicy":"PCIeLevel"},"rdma":{"selector":{"matchLabels":{"type":"fakeW"}},'
                        '"vfSelector":{"matchExpressions":[{"key":"type","operator":"In","values":["general",'
                        '"fakeG"]}]},"exclusivePolicy":"PCIeLevel"}}'
                    ),
                    'scheduling.koordinator.sh/device-joint-allocate': (
                        '{"deviceTypes":["gpu","rdma"],"requiredScope":"SamePCIe"}'
                    ),
                },
            },
            'spec': {
                'containers': [
                    {'name': 'main', 'resources': {'requests': {'koordinator.sh/rdma': '1', 'nvidia.com/gpu': '6'}}},
                ],
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
            '"koordinator.sh/gpu-memory-ratio":"100"},"id":"GPU-87a9047b-dade-e08c-c067-7fedfd2e2750"},{"minor":3,'
            '"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"83201216Ki",'
            '"koordinator.sh/gpu-memory-ratio":"100"},"id":"GPU-44a68f77-c18d-85a6-5425-e314c0e8e182"},{"minor":4,'
            '"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"83201216Ki",'
            '"koordinator.sh/gpu-memory-ratio":"100"},"id":"GPU-ac53dc25-2cb7-a11d-417f-ce23331dcea0"},{"minor":5,'
            '"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"83201216Ki",'
            '"koordinator.sh/gpu-memory-ratio":"100"},"id":"GPU-3908dbfd-6e0b-013d-549b-fca246a16fa0"}],'
            '"rdma":[{"minor":1,"resources":{"koordinator.sh/rdma":"1"},"id":"0000:1f:00.0",'
            '"extension":{"vfs":[{"busID":"0000:1f:00.2"}]}},{"minor":2,"resources":{"koordinator.sh/rdma":"1"},'
            '"id":"0000:90:00.0","extension":{"vfs":[{"busID":"0000:90:00.2"}]}},{"minor":3,'
            '"resources":{"koordinator.sh/rdma":"1"},"id":"0000:51:00.0",'
            '"extension":{"vfs":[{"busID":"0000:51:00.2"}]}}]}'
        ),
        'fail': None,
        'note': (
            "upstream compares structs (sorted by minor); the string is what PreBind's json.Marshal writes for the "
            'same allocations in allocation order, with ids from the CR'
        ),
    },
    {
        'name': 'TestAutopilotAllocatorWithExclusivePolicyAndRequiredScope/allocate 8 GPU and 4 VF',
        'source': 'pkg/scheduler/plugins/deviceshare/device_allocator_test.go',
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
                        '{"gpu":{"exclusivePolicy":"PCIeLevel"},"rdma":{"selector":{"matchLabels":{"type":"fakeW"}},'
                        '"vfSelector":{"matchExpressions":[{"key":"type","operator":"In","values":["general",'
                        '"fakeG"]}]},"exclusivePolicy":"PCIeLevel"}}'
                    ),
                    'scheduling.koordinator.sh/device-joint-allocate': (
                        '{"deviceTypes":["gpu","rdma"],"requiredScope":"SamePCIe"}'
                    ),
                },
            },
            'spec': {
                'containers': [
                    {'name': 'main', 'resources': {'requests': {'koordinator.sh/rdma': '1', 'nvidia.com/gpu': '8'}}},
                ],
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
            "upstream compares structs (sorted by minor); the string is what PreBind's json.Marshal writes for the "
            'same allocations in allocation order, with ids from the CR'
        ),
    },
    {
        'name': (
            'TestAutopilotAllocatorWithExclusivePolicyAndRequiredScope/allocate 2 GPU and 1 VF with assigned devices'
        ),
        'source': 'pkg/scheduler/plugins/deviceshare/device_allocator_test.go',
        'device': FAKE_DEVICE_CR,
        'node': {'metadata': {'name': 'test-node-1'}},
        'assigned': [
            (
                '{"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":"100",'
                '"koordinator.sh/gpu-memory":"83201216Ki","koordinator.sh/gpu-memory-ratio":"100"}}],'
                '"rdma":[{"minor":1,"resources":{"koordinator.sh/rdma":"100"},'
                '"extension":{"vfs":[{"busID":"0000:1f:00.2"}]}}]}'
            ),
        ],
        'pod': {
            'metadata': {
                'namespace': 'default',
                'name': 'test-pod',
                'uid': 'uid-test-pod',
                'annotations': {
                    'scheduling.koordinator.sh/device-allocate-hint': (
                        '{"gpu":{"exclusivePolicy":"PCIeLevel"},"rdma":{"selector":{"matchLabels":{"type":"fakeW"}},'
                        '"vfSelector":{"matchExpressions":[{"key":"type","operator":"In","values":["general",'
                        '"fakeG"]}]},"exclusivePolicy":"PCIeLevel"}}'
                    ),
                    'scheduling.koordinator.sh/device-joint-allocate': (
                        '{"deviceTypes":["gpu","rdma"],"requiredScope":"SamePCIe"}'
                    ),
                },
            },
            'spec': {
                'containers': [
                    {'name': 'main', 'resources': {'requests': {'koordinator.sh/rdma': '1', 'nvidia.com/gpu': '2'}}},
                ],
            },
        },
        'scored': False,
        'strategy': 'LeastAllocated',
        'expect': (
            '{"gpu":[{"minor":2,"resources":{"koordinator.sh/gpu-core":"100",'
            '"koordinator.sh/gpu-memory":"83201216Ki","koordinator.sh/gpu-memory-ratio":"100"},'
            '"id":"GPU-87a9047b-dade-e08c-c067-7fedfd2e2750"},{"minor":3,'
            '"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"83201216Ki",'
            '"koordinator.sh/gpu-memory-ratio":"100"},"id":"GPU-44a68f77-c18d-85a6-5425-e314c0e8e182"}],'
            '"rdma":[{"minor":2,"resources":{"koordinator.sh/rdma":"1"},"id":"0000:90:00.0",'
            '"extension":{"vfs":[{"busID":"0000:90:00.2"}]}}]}'
        ),
        'fail': None,
        'note': (
            "upstream compares structs (sorted by minor); the string is what PreBind's json.Marshal writes for the "
            'same allocations in allocation order, with ids from the CR; the switch with a used card cannot hold 2'
        ),
    },
    {
        'name': (
            'TestAutopilotAllocatorWithExclusivePolicyAndRequiredScope/allocate 3 GPU and 2 VF with assigned devices'
        ),
        'source': 'pkg/scheduler/plugins/deviceshare/device_allocator_test.go',
        'device': FAKE_DEVICE_CR,
        'node': {'metadata': {'name': 'test-node-1'}},
        'assigned': [
            (
                '{"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":"100",'
                '"koordinator.sh/gpu-memory":"83201216Ki","koordinator.sh/gpu-memory-ratio":"100"}}],'
                '"rdma":[{"minor":1,"resources":{"koordinator.sh/rdma":"100"},'
                '"extension":{"vfs":[{"busID":"0000:1f:00.2"}]}}]}'
            ),
        ],
        'pod': {
            'metadata': {
                'namespace': 'default',
                'name': 'test-pod',
                'uid': 'uid-test-pod',
                'annotations': {
                    'scheduling.koordinator.sh/device-allocate-hint': (
                        '{"gpu":{"exclusivePolicy":"PCIeLevel"},"rdma":{"selector":{"matchLabels":{"type":"fakeW"}},'
                        '"vfSelector":{"matchExpressions":[{"key":"type","operator":"In","values":["general",'
                        '"fakeG"]}]},"exclusivePolicy":"PCIeLevel"}}'
                    ),
                    'scheduling.koordinator.sh/device-joint-allocate': (
                        '{"deviceTypes":["gpu","rdma"],"requiredScope":"SamePCIe"}'
                    ),
                },
            },
            'spec': {
                'containers': [
                    {'name': 'main', 'resources': {'requests': {'koordinator.sh/rdma': '1', 'nvidia.com/gpu': '3'}}},
                ],
            },
        },
        'scored': False,
        'strategy': 'LeastAllocated',
        'expect': None,
        'fail': {'reason': 'node(s) Device Joint-Allocate rules violation', 'unresolvable': False},
        'note': (
            'GPUs 1,2,3 sit on switches 0 and 1; NIC 1 (switch 0) is wholly used, so the NICs picked are 2 and 3 '
            "(switches 1, 2) and SamePCIe fails. The PCIeLevel exclusive policy does not change this: upstream's "
            'nodeDevice.filter discards the result of sets.Int.Intersection, so the policy filters nothing'
        ),
    },
    {
        'name': 'TestAutopilotAllocator/Only 1 RDMA and 4 PCIE with 2 GPUs Per PCIE, allocate 4 GPUs',
        'source': 'pkg/scheduler/plugins/deviceshare/device_allocator_test.go',
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
                    'scheduling.koordinator.sh/device-joint-allocate': '{"deviceTypes":["gpu","rdma"]}',
                },
            },
            'spec': {
                'containers': [
                    {'name': 'main', 'resources': {'requests': {'koordinator.sh/rdma': '1', 'nvidia.com/gpu': '4'}}},
                ],
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
            '"koordinator.sh/gpu-memory-ratio":"100"},"id":"GPU-87a9047b-dade-e08c-c067-7fedfd2e2750"},{"minor":3,'
            '"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"83201216Ki",'
            '"koordinator.sh/gpu-memory-ratio":"100"},"id":"GPU-44a68f77-c18d-85a6-5425-e314c0e8e182"}],'
            '"rdma":[{"minor":1,"resources":{"koordinator.sh/rdma":"1"},"id":"0000:1f:00.0",'
            '"extension":{"vfs":[{"busID":"0000:20:00.0"}]}}]}'
        ),
        'fail': None,
        'note': 'without SamePCIe one NIC is enough: NICs 2-4 have no VF and are skipped',
    },
    {
        'name': 'TestAutopilotAllocator/1 RDMA with 2 GPUs Per PCIE, 2 NUMA Nodes, assigned 4 GPUs, requests 4 GPUs',
        'source': 'pkg/scheduler/plugins/deviceshare/device_allocator_test.go',
        'device': CR_2_NUMA_4_PCIE,
        'node': {'metadata': {'name': 'test-node-1'}},
        'assigned': [
            (
                '{"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":"100",'
                '"koordinator.sh/gpu-memory":"83201216Ki","koordinator.sh/gpu-memory-ratio":"100"}},{"minor":1,'
                '"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"83201216Ki",'
                '"koordinator.sh/gpu-memory-ratio":"100"}},{"minor":2,"resources":{"koordinator.sh/gpu-core":"100",'
                '"koordinator.sh/gpu-memory":"83201216Ki","koordinator.sh/gpu-memory-ratio":"100"}},{"minor":3,'
                '"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"83201216Ki",'
                '"koordinator.sh/gpu-memory-ratio":"100"}}],"rdma":[{"minor":1,'
                '"resources":{"koordinator.sh/rdma":"1"},"extension":{"vfs":[{"busID":"0000:20:00.0"}]}}]}'
            ),
        ],
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
                    {'name': 'main', 'resources': {'requests': {'koordinator.sh/rdma': '1', 'nvidia.com/gpu': '4'}}},
                ],
            },
        },
        'scored': False,
        'strategy': 'LeastAllocated',
        'expect': (
            '{"gpu":[{"minor":4,"resources":{"koordinator.sh/gpu-core":"100",'
            '"koordinator.sh/gpu-memory":"83201216Ki","koordinator.sh/gpu-memory-ratio":"100"},'
            '"id":"GPU-ac53dc25-2cb7-a11d-417f-ce23331dcea0"},{"minor":5,'
            '"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"83201216Ki",'
            '"koordinator.sh/gpu-memory-ratio":"100"},"id":"GPU-3908dbfd-6e0b-013d-549b-fca246a16fa0"},{"minor":6,'
            '"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"83201216Ki",'
            '"koordinator.sh/gpu-memory-ratio":"100"},"id":"GPU-7a87e98a-a1a7-28bc-c880-28c870bf0c7d"},{"minor":7,'
            '"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"83201216Ki",'
            '"koordinator.sh/gpu-memory-ratio":"100"},"id":"GPU-c3b7de0e-8a41-9bdb-3f71-8175c3438890"}],'
            '"rdma":[{"minor":3,"resources":{"koordinator.sh/rdma":"1"},"id":"0000:51:00.0",'
            '"extension":{"vfs":[{"busID":"0000:22:00.0"}]}},{"minor":4,"resources":{"koordinator.sh/rdma":"1"},'
            '"id":"0000:b9:00.0","extension":{"vfs":[{"busID":"0000:23:00.0"}]}}]}'
        ),
        'fail': None,
    },
    {
        'name': 'TestAutopilotAllocator/2 RDMA with 2 GPUs Per PCIE, 2 NUMA Nodes, assigned 4 GPUs, requests 4 GPUs',
        'source': 'pkg/scheduler/plugins/deviceshare/device_allocator_test.go',
        'device': CR_2_NICS_PER_PCIE,
        'node': {'metadata': {'name': 'test-node-1'}},
        'assigned': [
            (
                '{"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":"100",'
                '"koordinator.sh/gpu-memory":"83201216Ki","koordinator.sh/gpu-memory-ratio":"100"}},{"minor":1,'
                '"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"83201216Ki",'
                '"koordinator.sh/gpu-memory-ratio":"100"}},{"minor":2,"resources":{"koordinator.sh/gpu-core":"100",'
                '"koordinator.sh/gpu-memory":"83201216Ki","koordinator.sh/gpu-memory-ratio":"100"}},{"minor":3,'
                '"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"83201216Ki",'
                '"koordinator.sh/gpu-memory-ratio":"100"}}],"rdma":[{"minor":1,'
                '"resources":{"koordinator.sh/rdma":"1"},"extension":{"vfs":[{"busID":"0000:20:00.0"}]}}]}'
            ),
        ],
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
                    {'name': 'main', 'resources': {'requests': {'koordinator.sh/rdma': '400', 'nvidia.com/gpu': '4'}}},
                ],
            },
        },
        'scored': False,
        'strategy': 'LeastAllocated',
        'expect': (
            '{"gpu":[{"minor":4,"resources":{"koordinator.sh/gpu-core":"100",'
            '"koordinator.sh/gpu-memory":"83201216Ki","koordinator.sh/gpu-memory-ratio":"100"},'
            '"id":"GPU-ac53dc25-2cb7-a11d-417f-ce23331dcea0"},{"minor":5,'
            '"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"83201216Ki",'
            '"koordinator.sh/gpu-memory-ratio":"100"},"id":"GPU-3908dbfd-6e0b-013d-549b-fca246a16fa0"},{"minor":6,'
            '"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"83201216Ki",'
            '"koordinator.sh/gpu-memory-ratio":"100"},"id":"GPU-7a87e98a-a1a7-28bc-c880-28c870bf0c7d"},{"minor":7,'
            '"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"83201216Ki",'
            '"koordinator.sh/gpu-memory-ratio":"100"},"id":"GPU-c3b7de0e-8a41-9bdb-3f71-8175c3438890"}],'
            '"rdma":[{"minor":3,"resources":{"koordinator.sh/rdma":"100"},"id":"0000:51:00.0",'
            '"extension":{"vfs":[{"busID":"0000:22:00.0"}]}},{"minor":4,"resources":{"koordinator.sh/rdma":"100"},'
            '"id":"0000:b9:00.0","extension":{"vfs":[{"busID":"0000:23:00.0"}]}},{"minor":7,'
            '"resources":{"koordinator.sh/rdma":"100"},"id":"0001:51:00.0",'
            '"extension":{"vfs":[{"busID":"0001:22:00.0"}]}},{"minor":8,"resources":{"koordinator.sh/rdma":"100"},'
            '"id":"0001:b9:00.0","extension":{"vfs":[{"busID":"0001:23:00.0"}]}}]}'
        ),
        'fail': None,
        'note': "rdma 400 = 4 whole NICs; round-robin over the GPUs' switches (2, 3): 3, 4, then 7, 8",
    },
    {
        'name': (
            'TestAutopilotAllocator/1 RDMA with 1 GPU Per PCIE, but the first PCIE has multiple RDMA, requests 4 '
            'GPUs'
        ),
        'source': 'pkg/scheduler/plugins/deviceshare/device_allocator_test.go',
        'device': CR_3_NICS_ON_FIRST_PCIE,
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
                    {'name': 'main', 'resources': {'requests': {'koordinator.sh/rdma': '400', 'nvidia.com/gpu': '4'}}},
                ],
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
            '"koordinator.sh/gpu-memory-ratio":"100"},"id":"GPU-87a9047b-dade-e08c-c067-7fedfd2e2750"},{"minor":3,'
            '"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"83201216Ki",'
            '"koordinator.sh/gpu-memory-ratio":"100"},"id":"GPU-44a68f77-c18d-85a6-5425-e314c0e8e182"}],'
            '"rdma":[{"minor":0,"resources":{"koordinator.sh/rdma":"100"},"id":"0000:1f:00.0",'
            '"extension":{"vfs":[{"minor":-1,"busID":"0000:20:00.0"}]}},{"minor":3,'
            '"resources":{"koordinator.sh/rdma":"100"},"id":"0000:b9:00.0","extension":{"vfs":[{"minor":-1,'
            '"busID":"0000:23:00.0"}]}},{"minor":4,"resources":{"koordinator.sh/rdma":"100"},"id":"0000:b9:00.0",'
            '"extension":{"vfs":[{"minor":-1,"busID":"0000:24:00.0"}]}},{"minor":5,'
            '"resources":{"koordinator.sh/rdma":"100"},"id":"0000:b9:00.0","extension":{"vfs":[{"minor":-1,'
            '"busID":"0000:25:00.0"}]}}]}'
        ),
        'fail': None,
        'note': (
            'round-robin: the first NIC of each of the 4 switches before a second NIC of switch 0; VF minor -1 is '
            'written (only 0 is omitted)'
        ),
    },
    {
        'name': 'TestAutopilotAllocator/1 GPU with hostNetwork and apply for all RDMAs',
        'source': 'pkg/scheduler/plugins/deviceshare/device_allocator_test.go',
        'device': CR_NICS_WITHOUT_VFS,
        'node': {'metadata': {'name': 'test-node-1'}},
        'assigned': [],
        'pod': {
            'metadata': {
                'namespace': 'default',
                'name': 'test-pod',
                'uid': 'uid-test-pod',
                'annotations': {
                    'scheduling.koordinator.sh/device-allocate-hint': (
                        '{"rdma":{"selector":{"matchLabels":{"type":"fakeW"}},"allocateStrategy":"ApplyForAll"}}'
                    ),
                    'scheduling.koordinator.sh/device-joint-allocate': '{"deviceTypes":["gpu","rdma"]}',
                },
            },
            'spec': {
                'containers': [
                    {'name': 'main', 'resources': {'requests': {'koordinator.sh/rdma': '1', 'nvidia.com/gpu': '4'}}},
                ],
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
            '"koordinator.sh/gpu-memory-ratio":"100"},"id":"GPU-87a9047b-dade-e08c-c067-7fedfd2e2750"},{"minor":3,'
            '"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"83201216Ki",'
            '"koordinator.sh/gpu-memory-ratio":"100"},"id":"GPU-44a68f77-c18d-85a6-5425-e314c0e8e182"}],'
            '"rdma":[{"minor":1,"resources":{"koordinator.sh/rdma":"1"},"id":"0000:1f:00.0"},{"minor":2,'
            '"resources":{"koordinator.sh/rdma":"1"},"id":"0000:90:00.0"},{"minor":3,'
            '"resources":{"koordinator.sh/rdma":"1"},"id":"0000:51:00.0"},{"minor":4,'
            '"resources":{"koordinator.sh/rdma":"1"},"id":"0000:b9:00.0"}]}'
        ),
        'fail': None,
        'note': 'ApplyForAll drops rdma from the joint allocation; every NIC the selector matches gets rdma 1, no VF',
    },
    {
        'name': 'TestAutopilotAllocatorWithExclusivePolicyAndRequiredScope/1 GPU with hostNetwork',
        'source': 'pkg/scheduler/plugins/deviceshare/device_allocator_test.go',
        'device': CR_NICS_WITHOUT_VFS,
        'node': {'metadata': {'name': 'test-node-1'}},
        'assigned': [],
        'pod': {
            'metadata': {
                'namespace': 'default',
                'name': 'test-pod',
                'uid': 'uid-test-pod',
                'annotations': {
                    'scheduling.koordinator.sh/device-allocate-hint': (
                        '{"rdma":{"selector":{"matchLabels":{"type":"fakeW"}},"allocateStrategy":"ApplyForAll"}}'
                    ),
                    'scheduling.koordinator.sh/device-joint-allocate': (
                        '{"deviceTypes":["gpu","rdma"],"requiredScope":"SamePCIe"}'
                    ),
                },
            },
            'spec': {
                'containers': [
                    {'name': 'main', 'resources': {'requests': {'koordinator.sh/rdma': '1', 'nvidia.com/gpu': '4'}}},
                ],
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
            '"koordinator.sh/gpu-memory-ratio":"100"},"id":"GPU-87a9047b-dade-e08c-c067-7fedfd2e2750"},{"minor":3,'
            '"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"83201216Ki",'
            '"koordinator.sh/gpu-memory-ratio":"100"},"id":"GPU-44a68f77-c18d-85a6-5425-e314c0e8e182"}],'
            '"rdma":[{"minor":1,"resources":{"koordinator.sh/rdma":"1"},"id":"0000:1f:00.0"},{"minor":2,'
            '"resources":{"koordinator.sh/rdma":"1"},"id":"0000:90:00.0"},{"minor":3,'
            '"resources":{"koordinator.sh/rdma":"1"},"id":"0000:51:00.0"},{"minor":4,'
            '"resources":{"koordinator.sh/rdma":"1"},"id":"0000:b9:00.0"}]}'
        ),
        'fail': None,
        'note': 'ApplyForAll drops rdma from the joint allocation; every NIC the selector matches gets rdma 1, no VF',
    },
    {
        'name': 'TestAutopilotAllocator/allocate 8 GPU and 4 VF; secondary device well planned',
        'source': 'pkg/scheduler/plugins/deviceshare/device_allocator_test.go',
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
        'scored': False,
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
            '"koordinator.sh/gpu-memory-ratio":"100"},"id":"GPU-c3b7de0e-8a41-9bdb-3f71-8175c3438890"}]}'
        ),
        'fail': None,
        'note': (
            'Device label secondary-device-well-planned=true and a whole-GPU pod: outside Reserve (here: unscored, '
            'the Filter trial) the secondary type is not allocated at all'
        ),
    },
    {
        'name': (
            'TestAutopilotAllocatorWithExclusivePolicyAndRequiredScope/4 PCIE with 1 RDMA and 2 GPUs Per PCIE, '
            'allocate 4 GPUs'
        ),
        'source': 'pkg/scheduler/plugins/deviceshare/device_allocator_test.go',
        'device': CR_4_PCIE_1_NIC_EACH,
        'node': {'metadata': {'name': 'test-node-1'}},
        'assigned': [],
        'pod': {
            'metadata': {
                'namespace': 'default',
                'name': 'test-pod',
                'uid': 'uid-test-pod',
                'annotations': {
                    'scheduling.koordinator.sh/device-allocate-hint': (
                        '{"gpu":{"exclusivePolicy":"PCIeLevel"},"rdma":{"selector":{"matchLabels":{"type":"fakeW"}},'
                        '"vfSelector":{"matchExpressions":[{"key":"type","operator":"In","values":["general",'
                        '"fakeG"]}]},"exclusivePolicy":"PCIeLevel"}}'
                    ),
                    'scheduling.koordinator.sh/device-joint-allocate': (
                        '{"deviceTypes":["gpu","rdma"],"requiredScope":"SamePCIe"}'
                    ),
                },
            },
            'spec': {
                'containers': [
                    {'name': 'main', 'resources': {'requests': {'koordinator.sh/rdma': '1', 'nvidia.com/gpu': '4'}}},
                ],
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
            '"koordinator.sh/gpu-memory-ratio":"100"},"id":"GPU-87a9047b-dade-e08c-c067-7fedfd2e2750"},{"minor":3,'
            '"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"83201216Ki",'
            '"koordinator.sh/gpu-memory-ratio":"100"},"id":"GPU-44a68f77-c18d-85a6-5425-e314c0e8e182"}],'
            '"rdma":[{"minor":0,"resources":{"koordinator.sh/rdma":"1"},"id":"0000:1f:00.0",'
            '"extension":{"vfs":[{"minor":-1,"busID":"0000:20:00.0"}]}},{"minor":1,'
            '"resources":{"koordinator.sh/rdma":"1"},"id":"0000:90:00.0","extension":{"vfs":[{"minor":-1,'
            '"busID":"0000:21:00.0"}]}}]}'
        ),
        'fail': None,
    },
    {
        'name': (
            'TestAutopilotAllocatorWithExclusivePolicyAndRequiredScope/1 RDMA with 2 GPUs Per PCIE, 2 NUMA Node, '
            'allocated 4 GPUs, request 4 GPUs'
        ),
        'source': 'pkg/scheduler/plugins/deviceshare/device_allocator_test.go',
        'device': CR_2_NUMA_4_PCIE,
        'node': {'metadata': {'name': 'test-node-1'}},
        'assigned': [
            (
                '{"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":"100",'
                '"koordinator.sh/gpu-memory":"83201216Ki","koordinator.sh/gpu-memory-ratio":"100"}},{"minor":1,'
                '"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"83201216Ki",'
                '"koordinator.sh/gpu-memory-ratio":"100"}},{"minor":2,"resources":{"koordinator.sh/gpu-core":"100",'
                '"koordinator.sh/gpu-memory":"83201216Ki","koordinator.sh/gpu-memory-ratio":"100"}},{"minor":3,'
                '"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"83201216Ki",'
                '"koordinator.sh/gpu-memory-ratio":"100"}}],"rdma":[{"minor":1,'
                '"resources":{"koordinator.sh/rdma":"100"},"extension":{"vfs":[{"busID":"0000:20:00.0"}]}}]}'
            ),
        ],
        'pod': {
            'metadata': {
                'namespace': 'default',
                'name': 'test-pod',
                'uid': 'uid-test-pod',
                'annotations': {
                    'scheduling.koordinator.sh/device-allocate-hint': (
                        '{"gpu":{"exclusivePolicy":"PCIeLevel"},"rdma":{"selector":{"matchLabels":{"type":"fakeW"}},'
                        '"vfSelector":{"matchExpressions":[{"key":"type","operator":"In","values":["general",'
                        '"fakeG"]}]},"exclusivePolicy":"PCIeLevel"}}'
                    ),
                    'scheduling.koordinator.sh/device-joint-allocate': (
                        '{"deviceTypes":["gpu","rdma"],"requiredScope":"SamePCIe"}'
                    ),
                },
            },
            'spec': {
                'containers': [
                    {'name': 'main', 'resources': {'requests': {'koordinator.sh/rdma': '1', 'nvidia.com/gpu': '4'}}},
                ],
            },
        },
        'scored': False,
        'strategy': 'LeastAllocated',
        'expect': (
            '{"gpu":[{"minor":4,"resources":{"koordinator.sh/gpu-core":"100",'
            '"koordinator.sh/gpu-memory":"83201216Ki","koordinator.sh/gpu-memory-ratio":"100"},'
            '"id":"GPU-ac53dc25-2cb7-a11d-417f-ce23331dcea0"},{"minor":5,'
            '"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"83201216Ki",'
            '"koordinator.sh/gpu-memory-ratio":"100"},"id":"GPU-3908dbfd-6e0b-013d-549b-fca246a16fa0"},{"minor":6,'
            '"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"83201216Ki",'
            '"koordinator.sh/gpu-memory-ratio":"100"},"id":"GPU-7a87e98a-a1a7-28bc-c880-28c870bf0c7d"},{"minor":7,'
            '"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"83201216Ki",'
            '"koordinator.sh/gpu-memory-ratio":"100"},"id":"GPU-c3b7de0e-8a41-9bdb-3f71-8175c3438890"}],'
            '"rdma":[{"minor":3,"resources":{"koordinator.sh/rdma":"1"},"id":"0000:51:00.0",'
            '"extension":{"vfs":[{"busID":"0000:22:00.0"}]}},{"minor":4,"resources":{"koordinator.sh/rdma":"1"},'
            '"id":"0000:b9:00.0","extension":{"vfs":[{"busID":"0000:23:00.0"}]}}]}'
        ),
        'fail': None,
    },
    {
        'name': 'Test_allocateGPUWithLeastAllocatedScorer',
        'source': 'pkg/scheduler/plugins/deviceshare/device_allocator_test.go',
        'device': {
            'metadata': {'name': 'test-node'},
            'spec': {
                'devices': [
                    {
                        'type': 'gpu',
                        'minor': 1,
                        'health': True,
                        'resources': {
                            'koordinator.sh/gpu-core': '100',
                            'koordinator.sh/gpu-memory': '8Gi',
                            'koordinator.sh/gpu-memory-ratio': '100',
                        },
                    },
                    {
                        'type': 'gpu',
                        'minor': 2,
                        'health': True,
                        'resources': {
                            'koordinator.sh/gpu-core': '100',
                            'koordinator.sh/gpu-memory': '8Gi',
                            'koordinator.sh/gpu-memory-ratio': '100',
                        },
                    },
                    {
                        'type': 'gpu',
                        'minor': 3,
                        'health': True,
                        'resources': {
                            'koordinator.sh/gpu-core': '100',
                            'koordinator.sh/gpu-memory': '8Gi',
                            'koordinator.sh/gpu-memory-ratio': '100',
                        },
                    },
                    {
                        'type': 'gpu',
                        'minor': 4,
                        'health': True,
                        'resources': {
                            'koordinator.sh/gpu-core': '100',
                            'koordinator.sh/gpu-memory': '8Gi',
                            'koordinator.sh/gpu-memory-ratio': '100',
                        },
                    },
                ],
            },
        },
        'node': None,
        'assigned': [
            (
                '{"gpu":[{"minor":1,"resources":{"koordinator.sh/gpu-core":"50","koordinator.sh/gpu-memory":"4Gi",'
                '"koordinator.sh/gpu-memory-ratio":"50"}},{"minor":2,"resources":{"koordinator.sh/gpu-core":"50",'
                '"koordinator.sh/gpu-memory":"4Gi","koordinator.sh/gpu-memory-ratio":"50"}}]}'
            ),
        ],
        'pod': {
            'metadata': {'namespace': 'default', 'name': 'test-pod', 'uid': 'uid-test-pod'},
            'spec': {
                'containers': [
                    {
                        'name': 'main',
                        'resources': {
                            'requests': {'koordinator.sh/gpu-core': '50', 'koordinator.sh/gpu-memory-ratio': '50'},
                        },
                    },
                ],
            },
        },
        'scored': True,
        'strategy': 'LeastAllocated',
        'expect': (
            '{"gpu":[{"minor":3,"resources":{"koordinator.sh/gpu-core":"50","koordinator.sh/gpu-memory":"4Gi",'
            '"koordinator.sh/gpu-memory-ratio":"50"}}]}'
        ),
        'fail': None,
        'note': (
            "the fixture's deviceInfos carry no topology (no scope tree) and no ids, so the default allocator "
            'orders cards by the scorer (default weights); upstream compares structs'
        ),
    },
    {
        'name': 'Test_nodeDevice_allocateGPUWithMostAllocatedScorer',
        'source': 'pkg/scheduler/plugins/deviceshare/device_allocator_test.go',
        'device': {
            'metadata': {'name': 'test-node'},
            'spec': {
                'devices': [
                    {
                        'type': 'gpu',
                        'minor': 1,
                        'health': True,
                        'resources': {
                            'koordinator.sh/gpu-core': '100',
                            'koordinator.sh/gpu-memory': '8Gi',
                            'koordinator.sh/gpu-memory-ratio': '100',
                        },
                    },
                    {
                        'type': 'gpu',
                        'minor': 2,
                        'health': True,
                        'resources': {
                            'koordinator.sh/gpu-core': '100',
                            'koordinator.sh/gpu-memory': '8Gi',
                            'koordinator.sh/gpu-memory-ratio': '100',
                        },
                    },
                    {
                        'type': 'gpu',
                        'minor': 3,
                        'health': True,
                        'resources': {
                            'koordinator.sh/gpu-core': '100',
                            'koordinator.sh/gpu-memory': '8Gi',
                            'koordinator.sh/gpu-memory-ratio': '100',
                        },
                    },
                    {
                        'type': 'gpu',
                        'minor': 4,
                        'health': True,
                        'resources': {
                            'koordinator.sh/gpu-core': '100',
                            'koordinator.sh/gpu-memory': '8Gi',
                            'koordinator.sh/gpu-memory-ratio': '100',
                        },
                    },
                ],
            },
        },
        'node': None,
        'assigned': [
            (
                '{"gpu":[{"minor":3,"resources":{"koordinator.sh/gpu-core":"50","koordinator.sh/gpu-memory":"4Gi",'
                '"koordinator.sh/gpu-memory-ratio":"50"}},{"minor":4,"resources":{"koordinator.sh/gpu-core":"50",'
                '"koordinator.sh/gpu-memory":"4Gi","koordinator.sh/gpu-memory-ratio":"50"}}]}'
            ),
        ],
        'pod': {
            'metadata': {'namespace': 'default', 'name': 'test-pod', 'uid': 'uid-test-pod'},
            'spec': {
                'containers': [
                    {
                        'name': 'main',
                        'resources': {
                            'requests': {'koordinator.sh/gpu-core': '50', 'koordinator.sh/gpu-memory-ratio': '50'},
                        },
                    },
                ],
            },
        },
        'scored': True,
        'strategy': 'MostAllocated',
        'expect': (
            '{"gpu":[{"minor":3,"resources":{"koordinator.sh/gpu-core":"50","koordinator.sh/gpu-memory":"4Gi",'
            '"koordinator.sh/gpu-memory-ratio":"50"}}]}'
        ),
        'fail': None,
        'note': (
            "the fixture's deviceInfos carry no topology (no scope tree) and no ids, so the default allocator "
            'orders cards by the scorer (default weights); upstream compares structs'
        ),
    },
    {
        'name': 'Test_allocateGPUWithUnhealthyInstance',
        'source': 'pkg/scheduler/plugins/deviceshare/device_allocator_test.go',
        'device': {
            'metadata': {'name': 'test-node'},
            'spec': {
                'devices': [
                    {
                        'type': 'gpu',
                        'minor': 1,
                        'health': False,
                        'resources': {
                            'koordinator.sh/gpu-core': '100',
                            'koordinator.sh/gpu-memory': '8Gi',
                            'koordinator.sh/gpu-memory-ratio': '100',
                        },
                    },
                    {
                        'type': 'gpu',
                        'minor': 2,
                        'health': True,
                        'resources': {
                            'koordinator.sh/gpu-core': '100',
                            'koordinator.sh/gpu-memory': '8Gi',
                            'koordinator.sh/gpu-memory-ratio': '100',
                        },
                    },
                ],
            },
        },
        'node': None,
        'assigned': [],
        'pod': {
            'metadata': {'namespace': 'default', 'name': 'test-pod', 'uid': 'uid-test-pod'},
            'spec': {
                'containers': [
                    {
                        'name': 'main',
                        'resources': {
                            'requests': {'koordinator.sh/gpu-core': '50', 'koordinator.sh/gpu-memory-ratio': '50'},
                        },
                    },
                ],
            },
        },
        'scored': False,
        'strategy': 'LeastAllocated',
        'expect': (
            '{"gpu":[{"minor":2,"resources":{"koordinator.sh/gpu-core":"50","koordinator.sh/gpu-memory":"4Gi",'
            '"koordinator.sh/gpu-memory-ratio":"50"}}]}'
        ),
        'fail': None,
        'note': (
            'upstream sets podRequests {core 50, memory 4Gi, ratio 50} directly, a combination a pod cannot ask '
            'for; core 50 + ratio 50 normalizes to the same per-card request. Unhealthy minor 1 offers nothing'
        ),
    },
]
