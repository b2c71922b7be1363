"""Golden cases from allocator_gpu_test.go: TestAllocateByPartition (Hopper partitions), TestAllocateByTopology
(scope binpacking, required scopes) and TestAllocateSharedGPU."""

from tests.unit.sched_goldens.fixtures import (
    FAKE_DEVICE_CR,
    FAKE_H800_CR,
)

# CASES: list of dicts. name: upstream test / case name ('derived: ...' for code-derived ones); source: upstream
# file; device: the node's Device CR (None: no CR); node: the Node object or None; assigned: device-allocated
# annotations of pods already on the node; pod: the incoming pod; scored/strategy (and weights, when not the
# defaults): Filter trial (unscored) or Reserve (scored with that strategy); expect: the exact device-allocated value
# ('' = no device request / nothing written); fail: {reason | reason_any_of, unresolvable}; note: how the expectation
# was derived (upstream compares structs sorted by minor; the strings are what PreBind's json.Marshal writes).

CASES = [
    {
        'name': 'TestAllocateByPartition/allocate 0 GPU and 1 VF',
        'source': 'pkg/scheduler/plugins/deviceshare/allocator_gpu_test.go',
        'device': FAKE_H800_CR,
        'node': {
            'metadata': {
                'name': 'test-node-1',
                'labels': {
                    'node.koordinator.sh/gpu-model': 'H800',
                    'node.koordinator.sh/gpu-partition-policy': 'Honor',
                },
            },
        },
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
            '{"rdma":[{"minor":1,"resources":{"koordinator.sh/rdma":"1"},"id":"0000:09:00.0",'
            '"extension":{"vfs":[{"minor":16,"busID":"0000:09:02.2"}]}}]}'
        ),
        'fail': None,
        'note': (
            'node labels gpu-model (Hopper) + gpu-partition-policy Honor and no table on the CR: the built-in '
            "Hopper table applies. Upstream's test puts the already-normalized request (gpu-core/gpu-memory-ratio = "
            'N x 100) on the pod; upstream compares structs'
        ),
    },
    {
        'name': 'TestAllocateByPartition/allocate 1 GPU and 1 VF',
        'source': 'pkg/scheduler/plugins/deviceshare/allocator_gpu_test.go',
        'device': FAKE_H800_CR,
        'node': {
            'metadata': {
                'name': 'test-node-1',
                'labels': {
                    'node.koordinator.sh/gpu-model': 'H800',
                    'node.koordinator.sh/gpu-partition-policy': 'Honor',
                },
            },
        },
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
                    {
                        'name': 'main',
                        'resources': {
                            'requests': {
                                'koordinator.sh/gpu-core': '100',
                                'koordinator.sh/gpu-memory-ratio': '100',
                                'koordinator.sh/rdma': '1',
                            },
                        },
                    },
                ],
            },
        },
        'scored': False,
        'strategy': 'LeastAllocated',
        'expect': (
            '{"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":"100",'
            '"koordinator.sh/gpu-memory":"83201216Ki","koordinator.sh/gpu-memory-ratio":"100"},'
            '"id":"GPU-6b1ff724-4fe2-17b8-adfe-1f4c8a4148d1"}],"rdma":[{"minor":1,'
            '"resources":{"koordinator.sh/rdma":"1"},"id":"0000:09:00.0","extension":{"vfs":[{"minor":1,'
            '"busID":"0000:09:00.3"}]}}]}'
        ),
        'fail': None,
        'note': (
            'node labels gpu-model (Hopper) + gpu-partition-policy Honor and no table on the CR: the built-in '
            "Hopper table applies. Upstream's test puts the already-normalized request (gpu-core/gpu-memory-ratio = "
            'N x 100) on the pod; upstream compares structs'
        ),
    },
    {
        'name': 'TestAllocateByPartition/allocate 2 GPU and 2 VF',
        'source': 'pkg/scheduler/plugins/deviceshare/allocator_gpu_test.go',
        'device': FAKE_H800_CR,
        'node': {
            'metadata': {
                'name': 'test-node-1',
                'labels': {
                    'node.koordinator.sh/gpu-model': 'H800',
                    'node.koordinator.sh/gpu-partition-policy': 'Honor',
                },
            },
        },
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
                    {
                        'name': 'main',
                        'resources': {
                            'requests': {
                                'koordinator.sh/gpu-core': '200',
                                'koordinator.sh/gpu-memory-ratio': '200',
                                'koordinator.sh/rdma': '1',
                            },
                        },
                    },
                ],
            },
        },
        'scored': False,
        'strategy': 'LeastAllocated',
        'expect': (
            '{"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":"100",'
            '"koordinator.sh/gpu-memory":"83201216Ki","koordinator.sh/gpu-memory-ratio":"100"},'
            '"id":"GPU-6b1ff724-4fe2-17b8-adfe-1f4c8a4148d1"},{"minor":1,'
            '"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"83201216Ki",'
            '"koordinator.sh/gpu-memory-ratio":"100"},"id":"GPU-702ee422-96de-2dde-438f-b6eda3ef7efc"}],'
            '"rdma":[{"minor":1,"resources":{"koordinator.sh/rdma":"1"},"id":"0000:09:00.0",'
            '"extension":{"vfs":[{"minor":1,"busID":"0000:09:00.3"}]}},{"minor":2,'
            '"resources":{"koordinator.sh/rdma":"1"},"id":"0000:7f:00.0","extension":{"vfs":[{"minor":1,'
            '"busID":"0000:7f:00.3"}]}}]}'
        ),
        'fail': None,
        'note': (
            'node labels gpu-model (Hopper) + gpu-partition-policy Honor and no table on the CR: the built-in '
            "Hopper table applies. Upstream's test puts the already-normalized request (gpu-core/gpu-memory-ratio = "
            'N x 100) on the pod; upstream compares structs'
        ),
    },
    {
        'name': 'TestAllocateByPartition/allocate 3 GPU',
        'source': 'pkg/scheduler/plugins/deviceshare/allocator_gpu_test.go',
        'device': FAKE_H800_CR,
        'node': {
            'metadata': {
                'name': 'test-node-1',
                'labels': {
                    'node.koordinator.sh/gpu-model': 'H800',
                    'node.koordinator.sh/gpu-partition-policy': 'Honor',
                },
            },
        },
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
                    {
                        'name': 'main',
                        'resources': {
                            'requests': {
                                'koordinator.sh/gpu-core': '300',
                                'koordinator.sh/gpu-memory-ratio': '300',
                                'koordinator.sh/rdma': '1',
                            },
                        },
                    },
                ],
            },
        },
        'scored': False,
        'strategy': 'LeastAllocated',
        'expect': None,
        'fail': {'reason': 'node(s) Unsupported number of GPU requests', 'unresolvable': True},
        'note': 'Honor and the Hopper table has no 3-card partitions',
    },
    {
        'name': 'TestAllocateByPartition/allocate 4 GPU and 4 VF',
        'source': 'pkg/scheduler/plugins/deviceshare/allocator_gpu_test.go',
        'device': FAKE_H800_CR,
        'node': {
            'metadata': {
                'name': 'test-node-1',
                'labels': {
                    'node.koordinator.sh/gpu-model': 'H800',
                    'node.koordinator.sh/gpu-partition-policy': 'Honor',
                },
            },
        },
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
                    {
                        'name': 'main',
                        'resources': {
                            'requests': {
                                'koordinator.sh/gpu-core': '400',
                                'koordinator.sh/gpu-memory-ratio': '400',
                                'koordinator.sh/rdma': '1',
                            },
                        },
                    },
                ],
            },
        },
        'scored': False,
        'strategy': 'LeastAllocated',
        'expect': (
            '{"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":"100",'
            '"koordinator.sh/gpu-memory":"83201216Ki","koordinator.sh/gpu-memory-ratio":"100"},'
            '"id":"GPU-6b1ff724-4fe2-17b8-adfe-1f4c8a4148d1"},{"minor":1,'
            '"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"83201216Ki",'
            '"koordinator.sh/gpu-memory-ratio":"100"},"id":"GPU-702ee422-96de-2dde-438f-b6eda3ef7efc"},{"minor":2,'
            '"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"83201216Ki",'
            '"koordinator.sh/gpu-memory-ratio":"100"},"id":"GPU-e5a60856-a994-ec0b-1b04-eaa18205b00b"},{"minor":3,'
            '"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"83201216Ki",'
            '"koordinator.sh/gpu-memory-ratio":"100"},"id":"GPU-e1f2597e-0996-be81-19c4-8dd19bca3761"}],'
            '"rdma":[{"minor":1,"resources":{"koordinator.sh/rdma":"1"},"id":"0000:09:00.0",'
            '"extension":{"vfs":[{"minor":1,"busID":"0000:09:00.3"}]}},{"minor":2,'
            '"resources":{"koordinator.sh/rdma":"1"},"id":"0000:7f:00.0","extension":{"vfs":[{"minor":1,'
            '"busID":"0000:7f:00.3"}]}},{"minor":3,"resources":{"koordinator.sh/rdma":"1"},"id":"0000:a3:00.0",'
            '"extension":{"vfs":[{"minor":1,"busID":"0000:a3:00.3"}]}},{"minor":4,'
            '"resources":{"koordinator.sh/rdma":"1"},"id":"0000:c7:00.0","extension":{"vfs":[{"minor":1,'
            '"busID":"0000:c7:00.3"}]}}]}'
        ),
        'fail': None,
        'note': (
            'node labels gpu-model (Hopper) + gpu-partition-policy Honor and no table on the CR: the built-in '
            "Hopper table applies. Upstream's test puts the already-normalized request (gpu-core/gpu-memory-ratio = "
            'N x 100) on the pod; upstream compares structs'
        ),
    },
    {
        'name': 'TestAllocateByPartition/allocate 6 GPU and 3 VF',
        'source': 'pkg/scheduler/plugins/deviceshare/allocator_gpu_test.go',
        'device': FAKE_H800_CR,
        'node': {
            'metadata': {
                'name': 'test-node-1',
                'labels': {
                    'node.koordinator.sh/gpu-model': 'H800',
                    'node.koordinator.sh/gpu-partition-policy': 'Honor',
                },
            },
        },
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
                    {
                        'name': 'main',
                        'resources': {
                            'requests': {
                                'koordinator.sh/gpu-core': '600',
                                'koordinator.sh/gpu-memory-ratio': '600',
                                'koordinator.sh/rdma': '1',
                            },
                        },
                    },
                ],
            },
        },
        'scored': False,
        'strategy': 'LeastAllocated',
        'expect': None,
        'fail': {'reason': 'node(s) Unsupported number of GPU requests', 'unresolvable': True},
        'note': (
            'node labels gpu-model (Hopper) + gpu-partition-policy Honor and no table on the CR: the built-in '
            "Hopper table applies. Upstream's test puts the already-normalized request (gpu-core/gpu-memory-ratio = "
            'N x 100) on the pod; upstream compares structs'
        ),
    },
    {
        'name': 'TestAllocateByPartition/allocate 8 GPU and 8 VF',
        'source': 'pkg/scheduler/plugins/deviceshare/allocator_gpu_test.go',
        'device': FAKE_H800_CR,
        'node': {
            'metadata': {
                'name': 'test-node-1',
                'labels': {
                    'node.koordinator.sh/gpu-model': 'H800',
                    'node.koordinator.sh/gpu-partition-policy': 'Honor',
                },
            },
        },
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
                    {
                        'name': 'main',
                        'resources': {
                            'requests': {
                                'koordinator.sh/gpu-core': '800',
                                'koordinator.sh/gpu-memory-ratio': '800',
                                'koordinator.sh/rdma': '1',
                            },
                        },
                    },
                ],
            },
        },
        'scored': False,
        'strategy': 'LeastAllocated',
        'expect': (
            '{"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":"100",'
            '"koordinator.sh/gpu-memory":"83201216Ki","koordinator.sh/gpu-memory-ratio":"100"},'
            '"id":"GPU-6b1ff724-4fe2-17b8-adfe-1f4c8a4148d1"},{"minor":1,'
            '"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"83201216Ki",'
            '"koordinator.sh/gpu-memory-ratio":"100"},"id":"GPU-702ee422-96de-2dde-438f-b6eda3ef7efc"},{"minor":2,'
            '"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"83201216Ki",'
            '"koordinator.sh/gpu-memory-ratio":"100"},"id":"GPU-e5a60856-a994-ec0b-1b04-eaa18205b00b"},{"minor":3,'
            '"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"83201216Ki",'
            '"koordinator.sh/gpu-memory-ratio":"100"},"id":"GPU-e1f2597e-0996-be81-19c4-8dd19bca3761"},{"minor":4,'
            '"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"83201216Ki",'
            '"koordinator.sh/gpu-memory-ratio":"100"},"id":"GPU-02d911ef-e297-3063-1734-b8d3c3b3f5fc"},{"minor":5,'
            '"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"83201216Ki",'
            '"koordinator.sh/gpu-memory-ratio":"100"},"id":"GPU-8b1e54b7-84a6-960f-2723-ecee87de9d46"},{"minor":6,'
            '"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"83201216Ki",'
            '"koordinator.sh/gpu-memory-ratio":"100"},"id":"GPU-5a1654e4-2a92-19a4-e97e-6b4ca19509cd"},{"minor":7,'
            '"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"83201216Ki",'
            '"koordinator.sh/gpu-memory-ratio":"100"},"id":"GPU-f1646769-f47c-47b5-fe73-f7635d845bdf"}],'
            '"rdma":[{"minor":1,"resources":{"koordinator.sh/rdma":"1"},"id":"0000:09:00.0",'
            '"extension":{"vfs":[{"minor":1,"busID":"0000:09:00.3"}]}},{"minor":2,'
            '"resources":{"koordinator.sh/rdma":"1"},"id":"0000:7f:00.0","extension":{"vfs":[{"minor":1,'
            '"busID":"0000:7f:00.3"}]}},{"minor":3,"resources":{"koordinator.sh/rdma":"1"},"id":"0000:a3:00.0",'
            '"extension":{"vfs":[{"minor":1,"busID":"0000:a3:00.3"}]}},{"minor":4,'
            '"resources":{"koordinator.sh/rdma":"1"},"id":"0000:c7:00.0","extension":{"vfs":[{"minor":1,'
            '"busID":"0000:c7:00.3"}]}},{"minor":5,"resources":{"koordinator.sh/rdma":"1"},"id":"0001:08:00.0",'
            '"extension":{"vfs":[{"minor":1,"busID":"0001:08:00.3"}]}},{"minor":6,'
            '"resources":{"koordinator.sh/rdma":"1"},"id":"0001:7e:00.0","extension":{"vfs":[{"minor":1,'
            '"busID":"0001:7e:00.3"}]}},{"minor":7,"resources":{"koordinator.sh/rdma":"1"},"id":"0001:a2:00.0",'
            '"extension":{"vfs":[{"minor":1,"busID":"0001:a2:00.3"}]}},{"minor":8,'
            '"resources":{"koordinator.sh/rdma":"1"},"id":"0001:c6:00.0","extension":{"vfs":[{"minor":1,'
            '"busID":"0001:c6:00.3"}]}}]}'
        ),
        'fail': None,
        'note': (
            'node labels gpu-model (Hopper) + gpu-partition-policy Honor and no table on the CR: the built-in '
            "Hopper table applies. Upstream's test puts the already-normalized request (gpu-core/gpu-memory-ratio = "
            'N x 100) on the pod; upstream compares structs'
        ),
    },
    {
        'name': 'TestAllocateByPartition/allocate 2 GPU and 2 VF with assigned devices',
        'source': 'pkg/scheduler/plugins/deviceshare/allocator_gpu_test.go',
        'device': FAKE_H800_CR,
        'node': {
            'metadata': {
                'name': 'test-node-1',
                'labels': {
                    'node.koordinator.sh/gpu-model': 'H800',
                    'node.koordinator.sh/gpu-partition-policy': 'Honor',
                },
            },
        },
        'assigned': [
            (
                '{"gpu":[{"minor":2,"resources":{"koordinator.sh/gpu-core":"100",'
                '"koordinator.sh/gpu-memory":"83201216Ki","koordinator.sh/gpu-memory-ratio":"100"}},{"minor":3,'
                '"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"83201216Ki",'
                '"koordinator.sh/gpu-memory-ratio":"100"}}],"rdma":[{"minor":1,'
                '"resources":{"koordinator.sh/rdma":"1"},"extension":{"vfs":[{"minor":1,"busID":"0000:09:00.3"}]}},'
                '{"minor":2,"resources":{"koordinator.sh/rdma":"1"},"extension":{"vfs":[{"minor":1,'
                '"busID":"0000:7f:00.3"}]}}]}'
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
                    {
                        'name': 'main',
                        'resources': {
                            'requests': {
                                'koordinator.sh/gpu-core': '200',
                                'koordinator.sh/gpu-memory-ratio': '200',
                                'koordinator.sh/rdma': '1',
                            },
                        },
                    },
                ],
            },
        },
        'scored': False,
        'strategy': 'LeastAllocated',
        'expect': (
            '{"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":"100",'
            '"koordinator.sh/gpu-memory":"83201216Ki","koordinator.sh/gpu-memory-ratio":"100"},'
            '"id":"GPU-6b1ff724-4fe2-17b8-adfe-1f4c8a4148d1"},{"minor":1,'
            '"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"83201216Ki",'
            '"koordinator.sh/gpu-memory-ratio":"100"},"id":"GPU-702ee422-96de-2dde-438f-b6eda3ef7efc"}],'
            '"rdma":[{"minor":1,"resources":{"koordinator.sh/rdma":"1"},"id":"0000:09:00.0",'
            '"extension":{"vfs":[{"minor":2,"busID":"0000:09:00.4"}]}},{"minor":2,'
            '"resources":{"koordinator.sh/rdma":"1"},"id":"0000:7f:00.0","extension":{"vfs":[{"minor":2,'
            '"busID":"0000:7f:00.4"}]}}]}'
        ),
        'fail': None,
        'note': (
            'node labels gpu-model (Hopper) + gpu-partition-policy Honor and no table on the CR: the built-in '
            "Hopper table applies. Upstream's test puts the already-normalized request (gpu-core/gpu-memory-ratio = "
            'N x 100) on the pod; upstream compares structs; {0,1} keeps {4-7} whole (binpack score 102 against 2)'
        ),
    },
    {
        'name': 'TestAllocateByPartition/allocate 2 GPU and 2 VF with assigned devices; H100',
        'source': 'pkg/scheduler/plugins/deviceshare/allocator_gpu_test.go',
        'device': FAKE_H800_CR,
        'node': {
            'metadata': {
                'name': 'test-node-1',
                'labels': {
                    'node.koordinator.sh/gpu-model': 'H100',
                    'node.koordinator.sh/gpu-partition-policy': 'Honor',
                },
            },
        },
        'assigned': [
            (
                '{"gpu":[{"minor":2,"resources":{"koordinator.sh/gpu-core":"100",'
                '"koordinator.sh/gpu-memory":"83201216Ki","koordinator.sh/gpu-memory-ratio":"100"}},{"minor":3,'
                '"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"83201216Ki",'
                '"koordinator.sh/gpu-memory-ratio":"100"}}],"rdma":[{"minor":1,'
                '"resources":{"koordinator.sh/rdma":"1"},"extension":{"vfs":[{"minor":1,"busID":"0000:09:00.3"}]}},'
                '{"minor":2,"resources":{"koordinator.sh/rdma":"1"},"extension":{"vfs":[{"minor":1,'
                '"busID":"0000:7f:00.3"}]}}]}'
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
                    {
                        'name': 'main',
                        'resources': {
                            'requests': {
                                'koordinator.sh/gpu-core': '200',
                                'koordinator.sh/gpu-memory-ratio': '200',
                                'koordinator.sh/rdma': '1',
                            },
                        },
                    },
                ],
            },
        },
        'scored': False,
        'strategy': 'LeastAllocated',
        'expect': (
            '{"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":"100",'
            '"koordinator.sh/gpu-memory":"83201216Ki","koordinator.sh/gpu-memory-ratio":"100"},'
            '"id":"GPU-6b1ff724-4fe2-17b8-adfe-1f4c8a4148d1"},{"minor":1,'
            '"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"83201216Ki",'
            '"koordinator.sh/gpu-memory-ratio":"100"},"id":"GPU-702ee422-96de-2dde-438f-b6eda3ef7efc"}],'
            '"rdma":[{"minor":1,"resources":{"koordinator.sh/rdma":"1"},"id":"0000:09:00.0",'
            '"extension":{"vfs":[{"minor":2,"busID":"0000:09:00.4"}]}},{"minor":2,'
            '"resources":{"koordinator.sh/rdma":"1"},"id":"0000:7f:00.0","extension":{"vfs":[{"minor":2,'
            '"busID":"0000:7f:00.4"}]}}]}'
        ),
        'fail': None,
        'note': (
            'node labels gpu-model (Hopper) + gpu-partition-policy Honor and no table on the CR: the built-in '
            "Hopper table applies. Upstream's test puts the already-normalized request (gpu-core/gpu-memory-ratio = "
            'N x 100) on the pod; upstream compares structs; {0,1} keeps {4-7} whole (binpack score 102 against 2)'
        ),
    },
    {
        'name': 'TestAllocateByPartition/allocate 2 GPU and 2 VF with assigned devices; BinPack',
        'source': 'pkg/scheduler/plugins/deviceshare/allocator_gpu_test.go',
        'device': FAKE_H800_CR,
        'node': {
            'metadata': {
                'name': 'test-node-1',
                'labels': {
                    'node.koordinator.sh/gpu-model': 'H800',
                    'node.koordinator.sh/gpu-partition-policy': 'Honor',
                },
            },
        },
        'assigned': [
            (
                '{"gpu":[{"minor":4,"resources":{"koordinator.sh/gpu-core":"100",'
                '"koordinator.sh/gpu-memory":"83201216Ki","koordinator.sh/gpu-memory-ratio":"100"}}],'
                '"rdma":[{"minor":5,"resources":{"koordinator.sh/rdma":"1"},"extension":{"vfs":[{"minor":1,'
                '"busID":"0001:08:00.3"}]}}]}'
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
                    {
                        'name': 'main',
                        'resources': {
                            'requests': {
                                'koordinator.sh/gpu-core': '200',
                                'koordinator.sh/gpu-memory-ratio': '200',
                                'koordinator.sh/rdma': '1',
                            },
                        },
                    },
                ],
            },
        },
        'scored': False,
        'strategy': 'LeastAllocated',
        'expect': (
            '{"gpu":[{"minor":6,"resources":{"koordinator.sh/gpu-core":"100",'
            '"koordinator.sh/gpu-memory":"83201216Ki","koordinator.sh/gpu-memory-ratio":"100"},'
            '"id":"GPU-5a1654e4-2a92-19a4-e97e-6b4ca19509cd"},{"minor":7,'
            '"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"83201216Ki",'
            '"koordinator.sh/gpu-memory-ratio":"100"},"id":"GPU-f1646769-f47c-47b5-fe73-f7635d845bdf"}],'
            '"rdma":[{"minor":7,"resources":{"koordinator.sh/rdma":"1"},"id":"0001:a2:00.0",'
            '"extension":{"vfs":[{"minor":1,"busID":"0001:a2:00.3"}]}},{"minor":8,'
            '"resources":{"koordinator.sh/rdma":"1"},"id":"0001:c6:00.0","extension":{"vfs":[{"minor":1,'
            '"busID":"0001:c6:00.3"}]}}]}'
        ),
        'fail': None,
        'note': (
            'node labels gpu-model (Hopper) + gpu-partition-policy Honor and no table on the CR: the built-in '
            "Hopper table applies. Upstream's test puts the already-normalized request (gpu-core/gpu-memory-ratio = "
            'N x 100) on the pod; upstream compares structs; card 4 used: {6,7} keeps {0-3} whole'
        ),
    },
    {
        'name': 'TestAllocateByPartition/allocate 1 GPU and 1 VF with assigned devices; BinPack',
        'source': 'pkg/scheduler/plugins/deviceshare/allocator_gpu_test.go',
        'device': FAKE_H800_CR,
        'node': {
            'metadata': {
                'name': 'test-node-1',
                'labels': {
                    'node.koordinator.sh/gpu-model': 'H800',
                    'node.koordinator.sh/gpu-partition-policy': 'Honor',
                },
            },
        },
        'assigned': [
            (
                '{"gpu":[{"minor":4,"resources":{"koordinator.sh/gpu-core":"100",'
                '"koordinator.sh/gpu-memory":"83201216Ki","koordinator.sh/gpu-memory-ratio":"100"}}],'
                '"rdma":[{"minor":5,"resources":{"koordinator.sh/rdma":"1"},"extension":{"vfs":[{"minor":1,'
                '"busID":"0001:08:00.3"}]}}]}'
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
                    {
                        'name': 'main',
                        'resources': {
                            'requests': {
                                'koordinator.sh/gpu-core': '100',
                                'koordinator.sh/gpu-memory-ratio': '100',
                                'koordinator.sh/rdma': '1',
                            },
                        },
                    },
                ],
            },
        },
        'scored': False,
        'strategy': 'LeastAllocated',
        'expect': (
            '{"gpu":[{"minor":5,"resources":{"koordinator.sh/gpu-core":"100",'
            '"koordinator.sh/gpu-memory":"83201216Ki","koordinator.sh/gpu-memory-ratio":"100"},'
            '"id":"GPU-8b1e54b7-84a6-960f-2723-ecee87de9d46"}],"rdma":[{"minor":6,'
            '"resources":{"koordinator.sh/rdma":"1"},"id":"0001:7e:00.0","extension":{"vfs":[{"minor":1,'
            '"busID":"0001:7e:00.3"}]}}]}'
        ),
        'fail': None,
        'note': (
            'node labels gpu-model (Hopper) + gpu-partition-policy Honor and no table on the CR: the built-in '
            "Hopper table applies. Upstream's test puts the already-normalized request (gpu-core/gpu-memory-ratio = "
            'N x 100) on the pod; upstream compares structs; card 4 used: card 5 breaks nothing new'
        ),
    },
    {
        'name': (
            'TestAllocateByPartition/allocate 2 GPU and 2 VF with assigned devices; H100; gpuPartitionPolicyPrefer'
        ),
        'source': 'pkg/scheduler/plugins/deviceshare/allocator_gpu_test.go',
        'device': FAKE_H800_CR,
        'node': {
            'metadata': {
                'name': 'test-node-1',
                'labels': {
                    'node.koordinator.sh/gpu-model': 'H100',
                    'node.koordinator.sh/gpu-partition-policy': 'Prefer',
                },
            },
        },
        'assigned': [
            (
                '{"gpu":[{"minor":2,"resources":{"koordinator.sh/gpu-core":"100",'
                '"koordinator.sh/gpu-memory":"83201216Ki","koordinator.sh/gpu-memory-ratio":"100"}},{"minor":3,'
                '"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"83201216Ki",'
                '"koordinator.sh/gpu-memory-ratio":"100"}}],"rdma":[{"minor":1,'
                '"resources":{"koordinator.sh/rdma":"1"},"extension":{"vfs":[{"minor":1,"busID":"0000:09:00.3"}]}},'
                '{"minor":2,"resources":{"koordinator.sh/rdma":"1"},"extension":{"vfs":[{"minor":1,'
                '"busID":"0000:7f:00.3"}]}}]}'
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
                    {
                        'name': 'main',
                        'resources': {
                            'requests': {
                                'koordinator.sh/gpu-core': '300',
                                'koordinator.sh/gpu-memory-ratio': '300',
                                'koordinator.sh/rdma': '1',
                            },
                        },
                    },
                ],
            },
        },
        'scored': False,
        'strategy': 'LeastAllocated',
        'expect': (
            '{"gpu":[{"minor":4,"resources":{"koordinator.sh/gpu-core":"100",'
            '"koordinator.sh/gpu-memory":"83201216Ki","koordinator.sh/gpu-memory-ratio":"100"},'
            '"id":"GPU-02d911ef-e297-3063-1734-b8d3c3b3f5fc"},{"minor":5,'
            '"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"83201216Ki",'
            '"koordinator.sh/gpu-memory-ratio":"100"},"id":"GPU-8b1e54b7-84a6-960f-2723-ecee87de9d46"},{"minor":6,'
            '"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"83201216Ki",'
            '"koordinator.sh/gpu-memory-ratio":"100"},"id":"GPU-5a1654e4-2a92-19a4-e97e-6b4ca19509cd"}],'
            '"rdma":[{"minor":5,"resources":{"koordinator.sh/rdma":"1"},"id":"0001:08:00.0",'
            '"extension":{"vfs":[{"minor":1,"busID":"0001:08:00.3"}]}},{"minor":6,'
            '"resources":{"koordinator.sh/rdma":"1"},"id":"0001:7e:00.0","extension":{"vfs":[{"minor":1,'
            '"busID":"0001:7e:00.3"}]}},{"minor":7,"resources":{"koordinator.sh/rdma":"1"},"id":"0001:a2:00.0",'
            '"extension":{"vfs":[{"minor":1,"busID":"0001:a2:00.3"}]}}]}'
        ),
        'fail': None,
        'note': (
            'Prefer: the missing 3-card partition is not an error, the topology stage places 3 cards on NUMA node 1 '
            '(NUMA 0 has 2 free)'
        ),
    },
    {
        'name': 'TestAllocateByTopology/allocate 1 GPU and 1 VF with assigned devices; topology scope BinPack',
        'source': 'pkg/scheduler/plugins/deviceshare/allocator_gpu_test.go',
        'device': FAKE_DEVICE_CR,
        'node': {'metadata': {'name': 'test-node-1'}},
        'assigned': [
            (
                '{"gpu":[{"minor":5,"resources":{"koordinator.sh/gpu-core":"100",'
                '"koordinator.sh/gpu-memory":"83201216Ki","koordinator.sh/gpu-memory-ratio":"100"}}],'
                '"rdma":[{"minor":3,"resources":{"koordinator.sh/rdma":"1"},'
                '"extension":{"vfs":[{"busID":"0000:51:00.2"}]}}]}'
            ),
        ],
        'pod': {
            'metadata': {
                'namespace': 'default',
                'name': 'test-pod',
                'uid': 'uid-test-pod',
                'annotations': {
                    'scheduling.koordinator.sh/device-allocate-hint': (
                        '{"gpu":{},"rdma":{"selector":{"matchLabels":{"type":"fakeW"}},'
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
            '{"gpu":[{"minor":4,"resources":{"koordinator.sh/gpu-core":"100",'
            '"koordinator.sh/gpu-memory":"83201216Ki","koordinator.sh/gpu-memory-ratio":"100"},'
            '"id":"GPU-ac53dc25-2cb7-a11d-417f-ce23331dcea0"}],"rdma":[{"minor":3,'
            '"resources":{"koordinator.sh/rdma":"1"},"id":"0000:51:00.0","extension":{"vfs":[{"minor":1,'
            '"busID":"0000:51:00.3"}]}}]}'
        ),
        'fail': None,
        'note': (
            'upstream compares structs. NIC hints carry exclusivePolicy PCIeLevel, which upstream does not apply '
            '(nodeDevice.filter discards the result of sets.Int.Intersection): NIC 3 is partly used yet chosen '
            '(SamePCIe with card 4)'
        ),
    },
    {
        'name': 'TestAllocateByTopology/allocate 2 GPU and 1 VF with assigned devices; topology scope BinPack',
        'source': 'pkg/scheduler/plugins/deviceshare/allocator_gpu_test.go',
        'device': FAKE_DEVICE_CR,
        'node': {'metadata': {'name': 'test-node-1'}},
        'assigned': [
            (
                '{"gpu":[{"minor":5,"resources":{"koordinator.sh/gpu-core":"100",'
                '"koordinator.sh/gpu-memory":"83201216Ki","koordinator.sh/gpu-memory-ratio":"100"}}],'
                '"rdma":[{"minor":3,"resources":{"koordinator.sh/rdma":"1"},'
                '"extension":{"vfs":[{"busID":"0000:51:00.2"}]}}]}'
            ),
        ],
        'pod': {
            'metadata': {
                'namespace': 'default',
                'name': 'test-pod',
                'uid': 'uid-test-pod',
                'annotations': {
                    'scheduling.koordinator.sh/device-allocate-hint': (
                        '{"gpu":{},"rdma":{"selector":{"matchLabels":{"type":"fakeW"}},'
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
            '{"gpu":[{"minor":6,"resources":{"koordinator.sh/gpu-core":"100",'
            '"koordinator.sh/gpu-memory":"83201216Ki","koordinator.sh/gpu-memory-ratio":"100"},'
            '"id":"GPU-7a87e98a-a1a7-28bc-c880-28c870bf0c7d"},{"minor":7,'
            '"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"83201216Ki",'
            '"koordinator.sh/gpu-memory-ratio":"100"},"id":"GPU-c3b7de0e-8a41-9bdb-3f71-8175c3438890"}],'
            '"rdma":[{"minor":4,"resources":{"koordinator.sh/rdma":"1"},"id":"0000:b9:00.0",'
            '"extension":{"vfs":[{"busID":"0000:b9:00.2"}]}}]}'
        ),
        'fail': None,
        'note': 'switch 3 on the NUMA node that already has a used card wins over switch 0',
    },
    {
        'name': (
            'TestAllocateByTopology/allocate 1 GPU and 1 VF with assigned devices; requiredTopologyScope PCIE and '
            'BinPack'
        ),
        'source': 'pkg/scheduler/plugins/deviceshare/allocator_gpu_test.go',
        'device': FAKE_DEVICE_CR,
        'node': {'metadata': {'name': 'test-node-1'}},
        'assigned': [
            (
                '{"gpu":[{"minor":5,"resources":{"koordinator.sh/gpu-core":"100",'
                '"koordinator.sh/gpu-memory":"83201216Ki","koordinator.sh/gpu-memory-ratio":"100"}}],'
                '"rdma":[{"minor":3,"resources":{"koordinator.sh/rdma":"1"},'
                '"extension":{"vfs":[{"busID":"0000:51:00.2"}]}}]}'
            ),
        ],
        'pod': {
            'metadata': {
                'namespace': 'default',
                'name': 'test-pod',
                'uid': 'uid-test-pod',
                'annotations': {
                    'scheduling.koordinator.sh/device-allocate-hint': (
                        '{"gpu":{"requiredTopologyScope":"PCIe"},'
                        '"rdma":{"selector":{"matchLabels":{"type":"fakeW"}},'
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
            '{"gpu":[{"minor":6,"resources":{"koordinator.sh/gpu-core":"100",'
            '"koordinator.sh/gpu-memory":"83201216Ki","koordinator.sh/gpu-memory-ratio":"100"},'
            '"id":"GPU-7a87e98a-a1a7-28bc-c880-28c870bf0c7d"},{"minor":7,'
            '"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"83201216Ki",'
            '"koordinator.sh/gpu-memory-ratio":"100"},"id":"GPU-c3b7de0e-8a41-9bdb-3f71-8175c3438890"}],'
            '"rdma":[{"minor":4,"resources":{"koordinator.sh/rdma":"1"},"id":"0000:b9:00.0",'
            '"extension":{"vfs":[{"busID":"0000:b9:00.2"}]}}]}'
        ),
        'fail': None,
    },
    {
        'name': 'TestAllocateByTopology/allocate 1 GPU and 1 VF with assigned devices; requiredTopologyScope NUMANode',
        'source': 'pkg/scheduler/plugins/deviceshare/allocator_gpu_test.go',
        'device': FAKE_DEVICE_CR,
        'node': {'metadata': {'name': 'test-node-1'}},
        'assigned': [
            (
                '{"gpu":[{"minor":5,"resources":{"koordinator.sh/gpu-core":"100",'
                '"koordinator.sh/gpu-memory":"83201216Ki","koordinator.sh/gpu-memory-ratio":"100"}}],'
                '"rdma":[{"minor":3,"resources":{"koordinator.sh/rdma":"1"},'
                '"extension":{"vfs":[{"busID":"0000:51:00.2"}]}}]}'
            ),
        ],
        'pod': {
            'metadata': {
                'namespace': 'default',
                'name': 'test-pod',
                'uid': 'uid-test-pod',
                'annotations': {
                    'scheduling.koordinator.sh/device-allocate-hint': (
                        '{"gpu":{"requiredTopologyScope":"NUMANode"},'
                        '"rdma":{"selector":{"matchLabels":{"type":"fakeW"}},'
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
    },
    {
        'name': (
            'TestAllocateByTopology/allocate 1 GPU and 1 VF with assigned devices; requiredTopologyScope NUMANode, '
            'insufficient devices'
        ),
        'source': 'pkg/scheduler/plugins/deviceshare/allocator_gpu_test.go',
        'device': FAKE_DEVICE_CR,
        'node': {'metadata': {'name': 'test-node-1'}},
        'assigned': [
            (
                '{"gpu":[{"minor":5,"resources":{"koordinator.sh/gpu-core":"100",'
                '"koordinator.sh/gpu-memory":"83201216Ki","koordinator.sh/gpu-memory-ratio":"100"}},{"minor":0,'
                '"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"83201216Ki",'
                '"koordinator.sh/gpu-memory-ratio":"100"}}],"rdma":[{"minor":3,'
                '"resources":{"koordinator.sh/rdma":"1"},"extension":{"vfs":[{"busID":"0000:51:00.2"}]}},{"minor":1,'
                '"resources":{"koordinator.sh/rdma":"1"},"extension":{"vfs":[{"busID":"0000:1f:00.2"}]}}]}'
            ),
        ],
        'pod': {
            'metadata': {
                'namespace': 'default',
                'name': 'test-pod',
                'uid': 'uid-test-pod',
                'annotations': {
                    'scheduling.koordinator.sh/device-allocate-hint': (
                        '{"gpu":{"requiredTopologyScope":"NUMANode"},'
                        '"rdma":{"selector":{"matchLabels":{"type":"fakeW"}},'
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
        'expect': None,
        'fail': {'reason': 'Insufficient Topology Scoped GPU Devices', 'unresolvable': False},
        'note': 'each NUMA node has 3 free cards; the Node scope is too broad for NUMANode',
    },
    {
        'name': 'TestAllocateSharedGPU/allocate 1 GPU and 1 VF with assigned devices; topology scope BinPack',
        'source': 'pkg/scheduler/plugins/deviceshare/allocator_gpu_test.go',
        'device': FAKE_DEVICE_CR,
        'node': {'metadata': {'name': 'test-node-1'}},
        'assigned': [
            (
                '{"gpu":[{"minor":5,"resources":{"koordinator.sh/gpu-core":"100",'
                '"koordinator.sh/gpu-memory":"83201216Ki","koordinator.sh/gpu-memory-ratio":"100"}}],'
                '"rdma":[{"minor":3,"resources":{"koordinator.sh/rdma":"1"},'
                '"extension":{"vfs":[{"busID":"0000:51:00.2"}]}}]}'
            ),
        ],
        'pod': {
            'metadata': {
                'namespace': 'default',
                'name': 'test-pod',
                'uid': 'uid-test-pod',
                'annotations': {
                    'scheduling.koordinator.sh/device-allocate-hint': (
                        '{"gpu":{},"rdma":{"selector":{"matchLabels":{"type":"fakeW"}},'
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
                    {
                        'name': 'main',
                        'resources': {
                            'requests': {
                                'koordinator.sh/rdma': '1',
                                'koordinator.sh/gpu.shared': '1',
                                'koordinator.sh/gpu-memory-ratio': '50',
                                'koordinator.sh/gpu-core': '50',
                            },
                        },
                    },
                ],
            },
        },
        'scored': True,
        'strategy': 'MostAllocated',
        'weights': {'koordinator.sh/gpu-memory-ratio': 1},
        'expect': (
            '{"gpu":[{"minor":4,"resources":{"koordinator.sh/gpu-core":"50",'
            '"koordinator.sh/gpu-memory":"41600608Ki","koordinator.sh/gpu-memory-ratio":"50"},'
            '"id":"GPU-ac53dc25-2cb7-a11d-417f-ce23331dcea0"}],"rdma":[{"minor":3,'
            '"resources":{"koordinator.sh/rdma":"1"},"id":"0000:51:00.0","extension":{"vfs":[{"minor":1,'
            '"busID":"0000:51:00.3"}]}}]}'
        ),
        'fail': None,
        'note': (
            'upstream builds its scorer as MostAllocated with resources [gpu-memory-ratio: 1]; upstream compares '
            'structs'
        ),
    },
    {
        'name': 'TestAllocateSharedGPU/two scope, both not empty, shared binpack take Precedence',
        'source': 'pkg/scheduler/plugins/deviceshare/allocator_gpu_test.go',
        'device': FAKE_DEVICE_CR,
        'node': {'metadata': {'name': 'test-node-1'}},
        'assigned': [
            (
                '{"gpu":[{"minor":5,"resources":{"koordinator.sh/gpu-core":"100",'
                '"koordinator.sh/gpu-memory":"83201216Ki","koordinator.sh/gpu-memory-ratio":"100"}},{"minor":7,'
                '"resources":{"koordinator.sh/gpu-core":"50","koordinator.sh/gpu-memory":"41600608Ki",'
                '"koordinator.sh/gpu-memory-ratio":"50"}}],"rdma":[{"minor":3,'
                '"resources":{"koordinator.sh/rdma":"1"},"extension":{"vfs":[{"busID":"0000:51:00.2"}]}}]}'
            ),
        ],
        'pod': {
            'metadata': {
                'namespace': 'default',
                'name': 'test-pod',
                'uid': 'uid-test-pod',
                'annotations': {
                    'scheduling.koordinator.sh/device-allocate-hint': (
                        '{"gpu":{},"rdma":{"selector":{"matchLabels":{"type":"fakeW"}},'
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
                    {
                        'name': 'main',
                        'resources': {
                            'requests': {
                                'koordinator.sh/rdma': '1',
                                'koordinator.sh/gpu.shared': '1',
                                'koordinator.sh/gpu-memory-ratio': '50',
                                'koordinator.sh/gpu-core': '50',
                            },
                        },
                    },
                ],
            },
        },
        'scored': True,
        'strategy': 'MostAllocated',
        'weights': {'koordinator.sh/gpu-memory-ratio': 1},
        'expect': (
            '{"gpu":[{"minor":7,"resources":{"koordinator.sh/gpu-core":"50",'
            '"koordinator.sh/gpu-memory":"41600608Ki","koordinator.sh/gpu-memory-ratio":"50"},'
            '"id":"GPU-c3b7de0e-8a41-9bdb-3f71-8175c3438890"}],"rdma":[{"minor":4,'
            '"resources":{"koordinator.sh/rdma":"1"},"id":"0000:b9:00.0",'
            '"extension":{"vfs":[{"busID":"0000:b9:00.2"}]}}]}'
        ),
        'fail': None,
        'note': (
            'upstream builds its scorer as MostAllocated with resources [gpu-memory-ratio: 1]; upstream compares '
            'structs; switches 2 and 3 tie on depth and used scopes, the half-used card 7 scores higher'
        ),
    },
]
