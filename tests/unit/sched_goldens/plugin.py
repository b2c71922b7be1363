"""Golden cases from plugin_test.go Test_Plugin_Filter and Test_Plugin_Reserve; upstream's nodeDevice fixtures are
translated into a Device CR plus assigned pods."""

# CASES: list of dicts. name: upstream test / case name ('derived: ...' for code-derived ones); source: upstream
# file; device: the node's Device CR (None: no CR); node: the Node object or None; assigned: device-allocated
# annotations of pods already on the node; pod: the incoming pod; scored/strategy (and weights, when not the
# defaults): Filter trial (unscored) or Reserve (scored with that strategy); expect: the exact device-allocated value
# ('' = no device request / nothing written); fail: {reason | reason_any_of, unresolvable}; note: how the expectation
# was derived (upstream compares structs sorted by minor; the strings are what PreBind's json.Marshal writes).

CASES = [
    {
        'name': 'Test_Plugin_Filter/insufficient device resource 1',
        'source': 'pkg/scheduler/plugins/deviceshare/plugin_test.go',
        'device': {'metadata': {'name': 'test-node'}, 'spec': {'devices': []}},
        'node': {'metadata': {'name': 'test-node'}},
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
        'expect': None,
        'fail': {'reason': 'Insufficient gpu devices', 'unresolvable': True},
        'note': 'a node without GPUs: unresolvable (GPUHandler.CalcDesiredRequestsAndCount)',
    },
    {
        'name': 'Test_Plugin_Filter/insufficient device resource 2',
        'source': 'pkg/scheduler/plugins/deviceshare/plugin_test.go',
        'device': {
            'metadata': {'name': 'test-node'},
            'spec': {
                'devices': [
                    {
                        'type': 'gpu',
                        'id': '123456-1',
                        'minor': 0,
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
        'node': {'metadata': {'name': 'test-node'}},
        'assigned': [
            (
                '{"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":"25","koordinator.sh/gpu-memory":"4Gi",'
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
                            'requests': {'koordinator.sh/gpu-core': '100', 'koordinator.sh/gpu-memory-ratio': '100'},
                        },
                    },
                ],
            },
        },
        'scored': False,
        'strategy': 'LeastAllocated',
        'expect': None,
        'fail': {'reason': 'Insufficient gpu devices', 'unresolvable': False},
        'note': (
            "upstream's fixture is a nodeDevice (deviceTotal/deviceUsed, deviceInfos without topology); here the "
            'same node as a Device CR plus an assigned pod holding the used part. Filter runs without a scorer; '
            'upstream only checks the status, the annotation is what the same allocation marshals to'
        ),
    },
    {
        'name': 'Test_Plugin_Filter/insufficient device resource 3',
        'source': 'pkg/scheduler/plugins/deviceshare/plugin_test.go',
        'device': {
            'metadata': {'name': 'test-node'},
            'spec': {
                'devices': [
                    {
                        'type': 'gpu',
                        'id': '123456-1',
                        'minor': 0,
                        'health': True,
                        'resources': {
                            'koordinator.sh/gpu-core': '100',
                            'koordinator.sh/gpu-memory-ratio': '100',
                            'koordinator.sh/gpu-memory': '16Gi',
                        },
                    },
                    {
                        'type': 'fpga',
                        'id': '123456-fpga-1',
                        'minor': 0,
                        'health': True,
                        'resources': {'koordinator.sh/fpga': '100'},
                    },
                ],
            },
        },
        'node': {'metadata': {'name': 'test-node'}},
        'assigned': [
            (
                '{"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":"25","koordinator.sh/gpu-memory":"4Gi",'
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
                            'requests': {
                                'koordinator.sh/gpu-core': '100',
                                'koordinator.sh/gpu-memory-ratio': '100',
                                'koordinator.sh/fpga': '100',
                            },
                        },
                    },
                ],
            },
        },
        'scored': False,
        'strategy': 'LeastAllocated',
        'expect': None,
        'fail': {'reason': 'Insufficient gpu devices', 'unresolvable': False},
        'note': (
            "upstream's fixture is a nodeDevice (deviceTotal/deviceUsed, deviceInfos without topology); here the "
            'same node as a Device CR plus an assigned pod holding the used part. Filter runs without a scorer; '
            'upstream only checks the status, the annotation is what the same allocation marshals to'
        ),
    },
    {
        'name': 'Test_Plugin_Filter/insufficient device resource 4',
        'source': 'pkg/scheduler/plugins/deviceshare/plugin_test.go',
        'device': {
            'metadata': {'name': 'test-node'},
            'spec': {
                'devices': [
                    {
                        'type': 'gpu',
                        'id': '123456-1',
                        'minor': 0,
                        'health': True,
                        'resources': {
                            'koordinator.sh/gpu-core': '100',
                            'koordinator.sh/gpu-memory-ratio': '100',
                            'koordinator.sh/gpu-memory': '16Gi',
                        },
                    },
                    {
                        'type': 'fpga',
                        'id': '123456-fpga-1',
                        'minor': 0,
                        'health': True,
                        'resources': {'koordinator.sh/fpga': '100'},
                    },
                ],
            },
        },
        'node': {'metadata': {'name': 'test-node'}},
        'assigned': [
            (
                '{"fpga":[{"minor":0,"resources":{"koordinator.sh/fpga":"50"}}],"gpu":[{"minor":0,'
                '"resources":{"koordinator.sh/gpu-core":"25","koordinator.sh/gpu-memory":"4Gi",'
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
                            'requests': {
                                'koordinator.sh/gpu-core': '100',
                                'koordinator.sh/gpu-memory-ratio': '100',
                                'koordinator.sh/fpga': '100',
                            },
                        },
                    },
                ],
            },
        },
        'scored': False,
        'strategy': 'LeastAllocated',
        'expect': None,
        'fail': {'reason_any_of': ['Insufficient gpu devices', 'Insufficient fpga devices'], 'unresolvable': False},
        'note': (
            "upstream's fixture is a nodeDevice (deviceTotal/deviceUsed, deviceInfos without topology); here the "
            'same node as a Device CR plus an assigned pod holding the used part. Filter runs without a scorer; '
            'upstream only checks the status, the annotation is what the same allocation marshals to. Both types '
            "fail; upstream walks its request map in Go's random order and reports the first failure, so either "
            "reason is upstream's (its test checks 'Insufficient')"
        ),
    },
    {
        'name': 'Test_Plugin_Filter/insufficient device resource 5',
        'source': 'pkg/scheduler/plugins/deviceshare/plugin_test.go',
        'device': {
            'metadata': {'name': 'test-node'},
            'spec': {
                'devices': [
                    {
                        'type': 'gpu',
                        'id': '123456-1',
                        'minor': 0,
                        'health': True,
                        'resources': {
                            'huawei.com/npu-core': '8',
                            'huawei.com/npu-cpu': '7',
                            'huawei.com/npu-dvpp': '100',
                            'koordinator.sh/gpu-memory-ratio': '100',
                            'koordinator.sh/gpu-memory': '24Gi',
                        },
                    },
                ],
            },
        },
        'node': {
            'metadata': {
                'name': 'test-node',
                'labels': {'node.koordinator.sh/gpu-vendor': 'huawei', 'node.koordinator.sh/gpu-model': 'Ascend-310P'},
            },
        },
        'assigned': [
            (
                '{"gpu":[{"minor":0,"resources":{"huawei.com/npu-core":"6","huawei.com/npu-cpu":"6",'
                '"huawei.com/npu-dvpp":"75","koordinator.sh/gpu-memory":"18Gi",'
                '"koordinator.sh/gpu-memory-ratio":"75"}}]}'
            ),
        ],
        'pod': {
            'metadata': {'namespace': 'default', 'name': 'test-pod', 'uid': 'uid-test-pod'},
            'spec': {
                'containers': [
                    {
                        'name': 'main',
                        'resources': {
                            'requests': {'huawei.com/npu-core': '8', 'koordinator.sh/gpu-memory-ratio': '100'},
                        },
                    },
                ],
            },
        },
        'scored': False,
        'strategy': 'LeastAllocated',
        'expect': None,
        'fail': {'reason': 'Insufficient gpu devices', 'unresolvable': False},
        'note': (
            "upstream's fixture is a nodeDevice (deviceTotal/deviceUsed, deviceInfos without topology); here the "
            'same node as a Device CR plus an assigned pod holding the used part. Filter runs without a scorer; '
            'upstream only checks the status, the annotation is what the same allocation marshals to'
        ),
    },
    {
        'name': 'Test_Plugin_Filter/sufficient device resource 1',
        'source': 'pkg/scheduler/plugins/deviceshare/plugin_test.go',
        'device': {
            'metadata': {'name': 'test-node'},
            'spec': {
                'devices': [
                    {
                        'type': 'fpga',
                        'id': '123456-fpga-1',
                        'minor': 0,
                        'health': True,
                        'resources': {'koordinator.sh/fpga': '100'},
                    },
                ],
            },
        },
        'node': {'metadata': {'name': 'test-node'}},
        'assigned': [],
        'pod': {
            'metadata': {'namespace': 'default', 'name': 'test-pod', 'uid': 'uid-test-pod'},
            'spec': {'containers': [{'name': 'main', 'resources': {'requests': {'koordinator.sh/fpga': '100'}}}]},
        },
        'scored': False,
        'strategy': 'LeastAllocated',
        'expect': '{"fpga":[{"minor":0,"resources":{"koordinator.sh/fpga":"100"},"id":"123456-fpga-1"}]}',
        'fail': None,
        'note': (
            "upstream's fixture is a nodeDevice (deviceTotal/deviceUsed, deviceInfos without topology); here the "
            'same node as a Device CR plus an assigned pod holding the used part. Filter runs without a scorer; '
            'upstream only checks the status, the annotation is what the same allocation marshals to'
        ),
    },
    {
        'name': 'Test_Plugin_Filter/sufficient device resource 2',
        'source': 'pkg/scheduler/plugins/deviceshare/plugin_test.go',
        'device': {
            'metadata': {'name': 'test-node'},
            'spec': {
                'devices': [
                    {
                        'type': 'fpga',
                        'id': '123456-fpga-0',
                        'minor': 0,
                        'health': True,
                        'resources': {'koordinator.sh/fpga': '100'},
                    },
                    {
                        'type': 'fpga',
                        'id': '123456-fgpa-1',
                        'minor': 1,
                        'health': True,
                        'resources': {'koordinator.sh/fpga': '100'},
                    },
                ],
            },
        },
        'node': {'metadata': {'name': 'test-node'}},
        'assigned': ['{"fpga":[{"minor":0,"resources":{"koordinator.sh/fpga":"25"}}]}'],
        'pod': {
            'metadata': {'namespace': 'default', 'name': 'test-pod', 'uid': 'uid-test-pod'},
            'spec': {'containers': [{'name': 'main', 'resources': {'requests': {'koordinator.sh/fpga': '100'}}}]},
        },
        'scored': False,
        'strategy': 'LeastAllocated',
        'expect': '{"fpga":[{"minor":1,"resources":{"koordinator.sh/fpga":"100"},"id":"123456-fgpa-1"}]}',
        'fail': None,
        'note': (
            "upstream's fixture is a nodeDevice (deviceTotal/deviceUsed, deviceInfos without topology); here the "
            'same node as a Device CR plus an assigned pod holding the used part. Filter runs without a scorer; '
            'upstream only checks the status, the annotation is what the same allocation marshals to (the id '
            "123456-fgpa-1 is upstream's spelling)"
        ),
    },
    {
        'name': 'Test_Plugin_Filter/sufficient device resource 3',
        'source': 'pkg/scheduler/plugins/deviceshare/plugin_test.go',
        'device': {
            'metadata': {'name': 'test-node'},
            'spec': {
                'devices': [
                    {
                        'type': 'gpu',
                        'id': '123456-1',
                        'minor': 0,
                        'health': True,
                        'resources': {
                            'koordinator.sh/gpu-core': '100',
                            'koordinator.sh/gpu-memory-ratio': '100',
                            'koordinator.sh/gpu-memory': '16Gi',
                        },
                    },
                    {
                        'type': 'fpga',
                        'id': '123456-fpga-1',
                        'minor': 0,
                        'health': True,
                        'resources': {'koordinator.sh/fpga': '100'},
                    },
                ],
            },
        },
        'node': {'metadata': {'name': 'test-node'}},
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
        'expect': (
            '{"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"16Gi",'
            '"koordinator.sh/gpu-memory-ratio":"100"},"id":"123456-1"}]}'
        ),
        'fail': None,
        'note': (
            "upstream's fixture is a nodeDevice (deviceTotal/deviceUsed, deviceInfos without topology); here the "
            'same node as a Device CR plus an assigned pod holding the used part. Filter runs without a scorer; '
            'upstream only checks the status, the annotation is what the same allocation marshals to'
        ),
    },
    {
        'name': 'Test_Plugin_Filter/sufficient device resource 4',
        'source': 'pkg/scheduler/plugins/deviceshare/plugin_test.go',
        'device': {
            'metadata': {'name': 'test-node'},
            'spec': {
                'devices': [
                    {
                        'type': 'gpu',
                        'id': '123456-0',
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
                        'id': '123456-1',
                        'minor': 1,
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
        'node': {'metadata': {'name': 'test-node'}},
        'assigned': [
            (
                '{"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":"75","koordinator.sh/gpu-memory":"12Gi",'
                '"koordinator.sh/gpu-memory-ratio":"75"}}]}'
            ),
        ],
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
        'expect': (
            '{"gpu":[{"minor":1,"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"16Gi",'
            '"koordinator.sh/gpu-memory-ratio":"100"},"id":"123456-1"}]}'
        ),
        'fail': None,
        'note': (
            "upstream's fixture is a nodeDevice (deviceTotal/deviceUsed, deviceInfos without topology); here the "
            'same node as a Device CR plus an assigned pod holding the used part. Filter runs without a scorer; '
            'upstream only checks the status, the annotation is what the same allocation marshals to'
        ),
    },
    {
        'name': 'Test_Plugin_Filter/sufficient device resource 5',
        'source': 'pkg/scheduler/plugins/deviceshare/plugin_test.go',
        'device': {
            'metadata': {'name': 'test-node'},
            'spec': {
                'devices': [
                    {
                        'type': 'gpu',
                        'id': '123456-0',
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
                        'id': '123456-1',
                        'minor': 1,
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
        'node': {'metadata': {'name': 'test-node'}},
        'assigned': [
            (
                '{"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":"75","koordinator.sh/gpu-memory":"12Gi",'
                '"koordinator.sh/gpu-memory-ratio":"75"}}]}'
            ),
        ],
        'pod': {
            'metadata': {'namespace': 'default', 'name': 'test-pod', 'uid': 'uid-test-pod'},
            'spec': {
                'containers': [
                    {'name': 'main', 'resources': {'requests': {'koordinator.sh/gpu-memory-ratio': '100'}}},
                ],
            },
        },
        'scored': False,
        'strategy': 'LeastAllocated',
        'expect': (
            '{"gpu":[{"minor":1,"resources":{"koordinator.sh/gpu-memory":"16Gi",'
            '"koordinator.sh/gpu-memory-ratio":"100"},"id":"123456-1"}]}'
        ),
        'fail': None,
        'note': (
            "upstream's fixture is a nodeDevice (deviceTotal/deviceUsed, deviceInfos without topology); here the "
            'same node as a Device CR plus an assigned pod holding the used part. Filter runs without a scorer; '
            'upstream only checks the status, the annotation is what the same allocation marshals to; ratio only: '
            'memory is filled from the card'
        ),
    },
    {
        'name': 'Test_Plugin_Filter/sufficient device resource 6',
        'source': 'pkg/scheduler/plugins/deviceshare/plugin_test.go',
        'device': {
            'metadata': {'name': 'test-node'},
            'spec': {
                'devices': [
                    {
                        'type': 'gpu',
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
                        'minor': 1,
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
        'node': {'metadata': {'name': 'test-node'}},
        'assigned': [
            (
                '{"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":"75","koordinator.sh/gpu-memory":"12Gi",'
                '"koordinator.sh/gpu-memory-ratio":"75"}}]}'
            ),
        ],
        'pod': {
            'metadata': {'namespace': 'default', 'name': 'test-pod', 'uid': 'uid-test-pod'},
            'spec': {
                'containers': [{'name': 'main', 'resources': {'requests': {'koordinator.sh/gpu-memory': '16Gi'}}}],
            },
        },
        'scored': False,
        'strategy': 'LeastAllocated',
        'expect': (
            '{"gpu":[{"minor":1,"resources":{"koordinator.sh/gpu-memory":"16Gi",'
            '"koordinator.sh/gpu-memory-ratio":"100"}}]}'
        ),
        'fail': None,
        'note': (
            "upstream's fixture is a nodeDevice (deviceTotal/deviceUsed, deviceInfos without topology); here the "
            'same node as a Device CR plus an assigned pod holding the used part. Filter runs without a scorer; '
            'upstream only checks the status, the annotation is what the same allocation marshals to; memory only '
            "is a shared request; ratio = memory / card memory x 100; the fixture's devices have no id"
        ),
    },
    {
        'name': 'Test_Plugin_Filter/sufficient device resource 7',
        'source': 'pkg/scheduler/plugins/deviceshare/plugin_test.go',
        'device': {
            'metadata': {'name': 'test-node'},
            'spec': {
                'devices': [
                    {
                        'type': 'gpu',
                        'minor': 0,
                        'health': True,
                        'resources': {
                            'huawei.com/npu-core': '8',
                            'huawei.com/npu-cpu': '7',
                            'huawei.com/npu-dvpp': '100',
                            'koordinator.sh/gpu-memory-ratio': '100',
                            'koordinator.sh/gpu-memory': '24Gi',
                        },
                    },
                    {
                        'type': 'gpu',
                        'minor': 1,
                        'health': True,
                        'resources': {
                            'huawei.com/npu-core': '8',
                            'huawei.com/npu-cpu': '7',
                            'huawei.com/npu-dvpp': '100',
                            'koordinator.sh/gpu-memory-ratio': '100',
                            'koordinator.sh/gpu-memory': '24Gi',
                        },
                    },
                ],
            },
        },
        'node': {
            'metadata': {
                'name': 'test-node',
                'labels': {'node.koordinator.sh/gpu-vendor': 'huawei', 'node.koordinator.sh/gpu-model': 'Ascend-310P'},
            },
        },
        'assigned': [
            (
                '{"gpu":[{"minor":0,"resources":{"huawei.com/npu-core":"6","huawei.com/npu-cpu":"6",'
                '"huawei.com/npu-dvpp":"75","koordinator.sh/gpu-memory":"18Gi",'
                '"koordinator.sh/gpu-memory-ratio":"75"}}]}'
            ),
        ],
        'pod': {
            'metadata': {'namespace': 'default', 'name': 'test-pod', 'uid': 'uid-test-pod'},
            'spec': {
                'containers': [
                    {
                        'name': 'main',
                        'resources': {
                            'requests': {'huawei.com/npu-core': '8', 'koordinator.sh/gpu-memory-ratio': '100'},
                        },
                    },
                ],
            },
        },
        'scored': False,
        'strategy': 'LeastAllocated',
        'expect': (
            '{"gpu":[{"minor":1,"resources":{"huawei.com/npu-core":"8","koordinator.sh/gpu-memory":"24Gi",'
            '"koordinator.sh/gpu-memory-ratio":"100"}}]}'
        ),
        'fail': None,
        'note': (
            "upstream's fixture is a nodeDevice (deviceTotal/deviceUsed, deviceInfos without topology); here the "
            'same node as a Device CR plus an assigned pod holding the used part. Filter runs without a scorer; '
            'upstream only checks the status, the annotation is what the same allocation marshals to'
        ),
    },
    {
        'name': 'Test_Plugin_Filter/pod stuck when use multi gpu',
        'source': 'pkg/scheduler/plugins/deviceshare/plugin_test.go',
        'device': {
            'metadata': {'name': 'test-node'},
            'spec': {
                'devices': [
                    {
                        'type': 'gpu',
                        'id': '123456-0',
                        'minor': 0,
                        'health': True,
                        'resources': {
                            'koordinator.sh/gpu-core': '100',
                            'koordinator.sh/gpu-memory-ratio': '100',
                            'koordinator.sh/gpu-memory': '80Gi',
                        },
                    },
                    {
                        'type': 'gpu',
                        'id': '123456-1',
                        'minor': 1,
                        'health': True,
                        'resources': {
                            'koordinator.sh/gpu-core': '100',
                            'koordinator.sh/gpu-memory-ratio': '100',
                            'koordinator.sh/gpu-memory': '80Gi',
                        },
                    },
                    {
                        'type': 'gpu',
                        'id': '123456-2',
                        'minor': 2,
                        'health': True,
                        'resources': {
                            'koordinator.sh/gpu-core': '100',
                            'koordinator.sh/gpu-memory-ratio': '100',
                            'koordinator.sh/gpu-memory': '80Gi',
                        },
                    },
                    {
                        'type': 'gpu',
                        'id': '123456-3',
                        'minor': 3,
                        'health': True,
                        'resources': {
                            'koordinator.sh/gpu-core': '100',
                            'koordinator.sh/gpu-memory-ratio': '100',
                            'koordinator.sh/gpu-memory': '80Gi',
                        },
                    },
                    {
                        'type': 'gpu',
                        'id': '123456-4',
                        'minor': 4,
                        'health': True,
                        'resources': {
                            'koordinator.sh/gpu-core': '100',
                            'koordinator.sh/gpu-memory-ratio': '100',
                            'koordinator.sh/gpu-memory': '80Gi',
                        },
                    },
                    {
                        'type': 'gpu',
                        'id': '123456-5',
                        'minor': 5,
                        'health': True,
                        'resources': {
                            'koordinator.sh/gpu-core': '100',
                            'koordinator.sh/gpu-memory-ratio': '100',
                            'koordinator.sh/gpu-memory': '80Gi',
                        },
                    },
                    {
                        'type': 'gpu',
                        'id': '123456-6',
                        'minor': 6,
                        'health': True,
                        'resources': {
                            'koordinator.sh/gpu-core': '100',
                            'koordinator.sh/gpu-memory-ratio': '100',
                            'koordinator.sh/gpu-memory': '80Gi',
                        },
                    },
                    {
                        'type': 'gpu',
                        'id': '123456-7',
                        'minor': 7,
                        'health': True,
                        'resources': {
                            'koordinator.sh/gpu-core': '100',
                            'koordinator.sh/gpu-memory-ratio': '100',
                            'koordinator.sh/gpu-memory': '80Gi',
                        },
                    },
                    {
                        'type': 'gpu',
                        'minor': 8,
                        'health': True,
                        'resources': {
                            'koordinator.sh/gpu-core': '100',
                            'koordinator.sh/gpu-memory-ratio': '100',
                            'koordinator.sh/gpu-memory': '80Gi',
                        },
                    },
                ],
            },
        },
        'node': {'metadata': {'name': 'test-node'}},
        'assigned': [],
        'pod': {
            'metadata': {'namespace': 'default', 'name': 'test-pod', 'uid': 'uid-test-pod'},
            'spec': {
                'containers': [
                    {
                        'name': 'main',
                        'resources': {
                            'requests': {'koordinator.sh/gpu.shared': '4', 'koordinator.sh/gpu-memory': '160G'},
                        },
                    },
                ],
            },
        },
        'scored': False,
        'strategy': 'LeastAllocated',
        'expect': (
            '{"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-memory":"39062500Ki",'
            '"koordinator.sh/gpu-memory-ratio":"46"},"id":"123456-0"},{"minor":1,'
            '"resources":{"koordinator.sh/gpu-memory":"39062500Ki","koordinator.sh/gpu-memory-ratio":"46"},'
            '"id":"123456-1"},{"minor":2,"resources":{"koordinator.sh/gpu-memory":"39062500Ki",'
            '"koordinator.sh/gpu-memory-ratio":"46"},"id":"123456-2"},{"minor":3,'
            '"resources":{"koordinator.sh/gpu-memory":"39062500Ki","koordinator.sh/gpu-memory-ratio":"46"},'
            '"id":"123456-3"}]}'
        ),
        'fail': None,
        'note': (
            "upstream's fixture is a nodeDevice (deviceTotal/deviceUsed, deviceInfos without topology); here the "
            'same node as a Device CR plus an assigned pod holding the used part. Filter runs without a scorer; '
            'upstream only checks the status, the annotation is what the same allocation marshals to. gpu.shared 4 '
            '+ gpu-memory 160G: 4 cards of 40e9 bytes (BinarySI 39062500Ki); a multi-card shared request skips the '
            'topology stage, the default allocator takes minors 0-3; ratio int64(40e9 / 80Gi x 100) = 46. '
            "Upstream's minor 8 has no deviceInfo (so no id); here it is a device without id"
        ),
    },
    {
        'name': 'Test_Plugin_Reserve/insufficient device resource 1',
        'source': 'pkg/scheduler/plugins/deviceshare/plugin_test.go',
        'device': {
            'metadata': {'name': 'test-node'},
            'spec': {
                'devices': [
                    {
                        'type': 'gpu',
                        'id': '123456-1',
                        'minor': 0,
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
        'node': {'metadata': {'name': 'test-node'}},
        'assigned': [
            (
                '{"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":"75","koordinator.sh/gpu-memory":"12Gi",'
                '"koordinator.sh/gpu-memory-ratio":"75"}}]}'
            ),
        ],
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
        'scored': True,
        'strategy': 'LeastAllocated',
        'expect': None,
        'fail': {'reason': 'Insufficient gpu devices', 'unresolvable': False},
        'note': (
            "upstream's fixture is a nodeDevice (deviceTotal/deviceUsed, deviceInfos without topology); here the "
            'same node as a Device CR plus an assigned pod. Reserve runs with the default scorer (LeastAllocated, '
            'weights gpu-memory-ratio, gpu-memory, rdma, fpga = 1); upstream compares structs (allocationResult) '
            'and PreBind adds the ids'
        ),
    },
    {
        'name': 'Test_Plugin_Reserve/insufficient device resource 2',
        'source': 'pkg/scheduler/plugins/deviceshare/plugin_test.go',
        'device': {
            'metadata': {'name': 'test-node'},
            'spec': {
                'devices': [
                    {
                        'type': 'gpu',
                        'id': '123456-1',
                        'minor': 0,
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
        'node': {'metadata': {'name': 'test-node'}},
        'assigned': [
            (
                '{"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":"75","koordinator.sh/gpu-memory":"12Gi",'
                '"koordinator.sh/gpu-memory-ratio":"75"}}]}'
            ),
        ],
        'pod': {
            'metadata': {'namespace': 'default', 'name': 'test-pod', 'uid': 'uid-test-pod'},
            'spec': {
                'containers': [
                    {
                        'name': 'main',
                        'resources': {
                            'requests': {'koordinator.sh/gpu-core': '200', 'koordinator.sh/gpu-memory-ratio': '200'},
                        },
                    },
                ],
            },
        },
        'scored': True,
        'strategy': 'LeastAllocated',
        'expect': None,
        'fail': {'reason': 'Insufficient gpu devices', 'unresolvable': False},
        'note': (
            "upstream's fixture is a nodeDevice (deviceTotal/deviceUsed, deviceInfos without topology); here the "
            'same node as a Device CR plus an assigned pod. Reserve runs with the default scorer (LeastAllocated, '
            'weights gpu-memory-ratio, gpu-memory, rdma, fpga = 1); upstream compares structs (allocationResult) '
            'and PreBind adds the ids; 2 cards wanted, the node has 1'
        ),
    },
    {
        'name': 'Test_Plugin_Reserve/insufficient device resource 3',
        'source': 'pkg/scheduler/plugins/deviceshare/plugin_test.go',
        'device': {
            'metadata': {'name': 'test-node'},
            'spec': {
                'devices': [
                    {
                        'type': 'gpu',
                        'id': '123456-1',
                        'minor': 0,
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
        'node': {'metadata': {'name': 'test-node'}},
        'assigned': [],
        'pod': {
            'metadata': {'namespace': 'default', 'name': 'test-pod', 'uid': 'uid-test-pod'},
            'spec': {
                'containers': [
                    {
                        'name': 'main',
                        'resources': {
                            'requests': {'koordinator.sh/gpu-core': '200', 'koordinator.sh/gpu-memory-ratio': '200'},
                        },
                    },
                ],
            },
        },
        'scored': True,
        'strategy': 'LeastAllocated',
        'expect': None,
        'fail': {'reason': 'Insufficient gpu devices', 'unresolvable': False},
        'note': (
            "upstream's fixture is a nodeDevice (deviceTotal/deviceUsed, deviceInfos without topology); here the "
            'same node as a Device CR plus an assigned pod. Reserve runs with the default scorer (LeastAllocated, '
            'weights gpu-memory-ratio, gpu-memory, rdma, fpga = 1); upstream compares structs (allocationResult) '
            'and PreBind adds the ids'
        ),
    },
    {
        'name': 'Test_Plugin_Reserve/insufficient device resource 4',
        'source': 'pkg/scheduler/plugins/deviceshare/plugin_test.go',
        'device': {
            'metadata': {'name': 'test-node'},
            'spec': {
                'devices': [
                    {
                        'type': 'rdma',
                        'id': '123456-1',
                        'minor': 0,
                        'health': True,
                        'resources': {'koordinator.sh/rdma': '100'},
                    },
                ],
            },
        },
        'node': {'metadata': {'name': 'test-node'}},
        'assigned': ['{"rdma":[{"minor":0,"resources":{"koordinator.sh/rdma":"50"}}]}'],
        'pod': {
            'metadata': {'namespace': 'default', 'name': 'test-pod', 'uid': 'uid-test-pod'},
            'spec': {'containers': [{'name': 'main', 'resources': {'requests': {'koordinator.sh/rdma': '100'}}}]},
        },
        'scored': True,
        'strategy': 'LeastAllocated',
        'expect': None,
        'fail': {'reason': 'Insufficient rdma devices', 'unresolvable': False},
        'note': (
            "upstream's fixture is a nodeDevice (deviceTotal/deviceUsed, deviceInfos without topology); here the "
            'same node as a Device CR plus an assigned pod. Reserve runs with the default scorer (LeastAllocated, '
            'weights gpu-memory-ratio, gpu-memory, rdma, fpga = 1); upstream compares structs (allocationResult) '
            'and PreBind adds the ids'
        ),
    },
    {
        'name': 'Test_Plugin_Reserve/insufficient device resource 5',
        'source': 'pkg/scheduler/plugins/deviceshare/plugin_test.go',
        'device': {
            'metadata': {'name': 'test-node'},
            'spec': {
                'devices': [
                    {
                        'type': 'rdma',
                        'id': '123456-1',
                        'minor': 0,
                        'health': True,
                        'resources': {'koordinator.sh/rdma': '100'},
                    },
                    {
                        'type': 'fpga',
                        'id': '123456-1',
                        'minor': 0,
                        'health': True,
                        'resources': {'koordinator.sh/fpga': '100'},
                    },
                ],
            },
        },
        'node': {'metadata': {'name': 'test-node'}},
        'assigned': [],
        'pod': {
            'metadata': {'namespace': 'default', 'name': 'test-pod', 'uid': 'uid-test-pod'},
            'spec': {
                'containers': [
                    {
                        'name': 'main',
                        'resources': {'requests': {'koordinator.sh/rdma': '200', 'koordinator.sh/fpga': '200'}},
                    },
                ],
            },
        },
        'scored': True,
        'strategy': 'LeastAllocated',
        'expect': None,
        'fail': {'reason_any_of': ['Insufficient rdma devices', 'Insufficient fpga devices'], 'unresolvable': False},
        'note': (
            "upstream's fixture is a nodeDevice (deviceTotal/deviceUsed, deviceInfos without topology); here the "
            'same node as a Device CR plus an assigned pod. Reserve runs with the default scorer (LeastAllocated, '
            'weights gpu-memory-ratio, gpu-memory, rdma, fpga = 1); upstream compares structs (allocationResult) '
            "and PreBind adds the ids. Both types fail (2 devices each wanted); Go's map order picks which is "
            'reported'
        ),
    },
    {
        'name': 'Test_Plugin_Reserve/insufficient device resource 6',
        'source': 'pkg/scheduler/plugins/deviceshare/plugin_test.go',
        'device': {
            'metadata': {'name': 'test-node'},
            'spec': {
                'devices': [
                    {
                        'type': 'gpu',
                        'id': '123456-1',
                        'minor': 0,
                        'health': True,
                        'resources': {
                            'huawei.com/npu-core': '8',
                            'huawei.com/npu-cpu': '7',
                            'huawei.com/npu-dvpp': '100',
                            'koordinator.sh/gpu-memory-ratio': '100',
                            'koordinator.sh/gpu-memory': '24Gi',
                        },
                    },
                ],
            },
        },
        'node': {
            'metadata': {
                'name': 'test-node',
                'labels': {'node.koordinator.sh/gpu-vendor': 'huawei', 'node.koordinator.sh/gpu-model': 'Ascend-310P'},
            },
        },
        'assigned': [
            (
                '{"gpu":[{"minor":0,"resources":{"huawei.com/npu-core":"6","huawei.com/npu-cpu":"6",'
                '"huawei.com/npu-dvpp":"75","koordinator.sh/gpu-memory":"18Gi",'
                '"koordinator.sh/gpu-memory-ratio":"75"}}]}'
            ),
        ],
        'pod': {
            'metadata': {'namespace': 'default', 'name': 'test-pod', 'uid': 'uid-test-pod'},
            'spec': {
                'containers': [
                    {
                        'name': 'main',
                        'resources': {
                            'requests': {'huawei.com/npu-core': '8', 'koordinator.sh/gpu-memory-ratio': '100'},
                        },
                    },
                ],
            },
        },
        'scored': True,
        'strategy': 'LeastAllocated',
        'expect': None,
        'fail': {'reason': 'Insufficient gpu devices', 'unresolvable': False},
        'note': (
            "upstream's fixture is a nodeDevice (deviceTotal/deviceUsed, deviceInfos without topology); here the "
            'same node as a Device CR plus an assigned pod. Reserve runs with the default scorer (LeastAllocated, '
            'weights gpu-memory-ratio, gpu-memory, rdma, fpga = 1); upstream compares structs (allocationResult) '
            'and PreBind adds the ids'
        ),
    },
    {
        'name': 'Test_Plugin_Reserve/sufficient device resource 1',
        'source': 'pkg/scheduler/plugins/deviceshare/plugin_test.go',
        'device': {
            'metadata': {'name': 'test-node'},
            'spec': {
                'devices': [
                    {
                        'type': 'rdma',
                        'id': '123456-1',
                        'minor': 0,
                        'health': True,
                        'resources': {'koordinator.sh/rdma': '100'},
                    },
                    {
                        'type': 'fpga',
                        'id': '123456-1',
                        'minor': 0,
                        'health': True,
                        'resources': {'koordinator.sh/fpga': '100'},
                    },
                    {
                        'type': 'gpu',
                        'id': '123456-1',
                        'minor': 0,
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
        'node': {'metadata': {'name': 'test-node'}},
        'assigned': [],
        'pod': {
            'metadata': {'namespace': 'default', 'name': 'test-pod', 'uid': 'uid-test-pod'},
            'spec': {
                'containers': [
                    {
                        'name': 'main',
                        'resources': {
                            'requests': {
                                'koordinator.sh/gpu-core': '100',
                                'koordinator.sh/gpu-memory-ratio': '100',
                                'koordinator.sh/rdma': '100',
                                'koordinator.sh/fpga': '100',
                            },
                        },
                    },
                ],
            },
        },
        'scored': True,
        'strategy': 'LeastAllocated',
        'expect': (
            '{"fpga":[{"minor":0,"resources":{"koordinator.sh/fpga":"100"},"id":"123456-1"}],"gpu":[{"minor":0,'
            '"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"16Gi",'
            '"koordinator.sh/gpu-memory-ratio":"100"},"id":"123456-1"}],"rdma":[{"minor":0,'
            '"resources":{"koordinator.sh/rdma":"100"},"id":"123456-1"}]}'
        ),
        'fail': None,
        'note': (
            "upstream's fixture is a nodeDevice (deviceTotal/deviceUsed, deviceInfos without topology); here the "
            'same node as a Device CR plus an assigned pod. Reserve runs with the default scorer (LeastAllocated, '
            'weights gpu-memory-ratio, gpu-memory, rdma, fpga = 1); upstream compares structs (allocationResult) '
            'and PreBind adds the ids'
        ),
    },
    {
        'name': 'Test_Plugin_Reserve/sufficient device resource 2',
        'source': 'pkg/scheduler/plugins/deviceshare/plugin_test.go',
        'device': {
            'metadata': {'name': 'test-node'},
            'spec': {
                'devices': [
                    {
                        'type': 'rdma',
                        'id': '123456-1',
                        'minor': 0,
                        'health': True,
                        'resources': {'koordinator.sh/rdma': '100'},
                    },
                    {
                        'type': 'rdma',
                        'id': '123456-2',
                        'minor': 1,
                        'health': True,
                        'resources': {'koordinator.sh/rdma': '100'},
                    },
                    {
                        'type': 'fpga',
                        'id': '123456-1',
                        'minor': 0,
                        'health': True,
                        'resources': {'koordinator.sh/fpga': '100'},
                    },
                    {
                        'type': 'fpga',
                        'id': '123456-2',
                        'minor': 1,
                        'health': True,
                        'resources': {'koordinator.sh/fpga': '100'},
                    },
                    {
                        'type': 'gpu',
                        'id': '123456-1',
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
                        'id': '123456-2',
                        'minor': 1,
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
        'node': {'metadata': {'name': 'test-node'}},
        'assigned': [],
        'pod': {
            'metadata': {'namespace': 'default', 'name': 'test-pod', 'uid': 'uid-test-pod'},
            'spec': {
                'containers': [
                    {
                        'name': 'main',
                        'resources': {
                            'requests': {
                                'koordinator.sh/gpu-core': '200',
                                'koordinator.sh/gpu-memory-ratio': '200',
                                'koordinator.sh/rdma': '200',
                                'koordinator.sh/fpga': '200',
                            },
                        },
                    },
                ],
            },
        },
        'scored': True,
        'strategy': 'LeastAllocated',
        'expect': (
            '{"fpga":[{"minor":0,"resources":{"koordinator.sh/fpga":"100"},"id":"123456-1"},{"minor":1,'
            '"resources":{"koordinator.sh/fpga":"100"},"id":"123456-2"}],"gpu":[{"minor":0,'
            '"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"16Gi",'
            '"koordinator.sh/gpu-memory-ratio":"100"},"id":"123456-1"},{"minor":1,'
            '"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"16Gi",'
            '"koordinator.sh/gpu-memory-ratio":"100"},"id":"123456-2"}],"rdma":[{"minor":0,'
            '"resources":{"koordinator.sh/rdma":"100"},"id":"123456-1"},{"minor":1,'
            '"resources":{"koordinator.sh/rdma":"100"},"id":"123456-2"}]}'
        ),
        'fail': None,
        'note': (
            "upstream's fixture is a nodeDevice (deviceTotal/deviceUsed, deviceInfos without topology); here the "
            'same node as a Device CR plus an assigned pod. Reserve runs with the default scorer (LeastAllocated, '
            'weights gpu-memory-ratio, gpu-memory, rdma, fpga = 1); upstream compares structs (allocationResult) '
            'and PreBind adds the ids; equal scores keep minor order'
        ),
    },
    {
        'name': 'Test_Plugin_Reserve/sufficient device resource 3',
        'source': 'pkg/scheduler/plugins/deviceshare/plugin_test.go',
        'device': {
            'metadata': {'name': 'test-node'},
            'spec': {
                'devices': [
                    {
                        'type': 'gpu',
                        'id': '123456-1',
                        'minor': 0,
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
        'node': {'metadata': {'name': 'test-node'}},
        'assigned': [],
        'pod': {
            'metadata': {'namespace': 'default', 'name': 'test-pod', 'uid': 'uid-test-pod'},
            'spec': {
                'containers': [
                    {'name': 'main', 'resources': {'requests': {'koordinator.sh/gpu-memory-ratio': '100'}}},
                ],
            },
        },
        'scored': True,
        'strategy': 'LeastAllocated',
        'expect': (
            '{"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-memory":"16Gi",'
            '"koordinator.sh/gpu-memory-ratio":"100"},"id":"123456-1"}]}'
        ),
        'fail': None,
        'note': (
            "upstream's fixture is a nodeDevice (deviceTotal/deviceUsed, deviceInfos without topology); here the "
            'same node as a Device CR plus an assigned pod. Reserve runs with the default scorer (LeastAllocated, '
            'weights gpu-memory-ratio, gpu-memory, rdma, fpga = 1); upstream compares structs (allocationResult) '
            'and PreBind adds the ids'
        ),
    },
    {
        'name': 'Test_Plugin_Reserve/sufficient device resource 4',
        'source': 'pkg/scheduler/plugins/deviceshare/plugin_test.go',
        'device': {
            'metadata': {'name': 'test-node'},
            'spec': {
                'devices': [
                    {
                        'type': 'gpu',
                        'id': '123456-1',
                        'minor': 0,
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
        'node': {'metadata': {'name': 'test-node'}},
        'assigned': [],
        'pod': {
            'metadata': {'namespace': 'default', 'name': 'test-pod', 'uid': 'uid-test-pod'},
            'spec': {
                'containers': [{'name': 'main', 'resources': {'requests': {'koordinator.sh/gpu-memory': '16Gi'}}}],
            },
        },
        'scored': True,
        'strategy': 'LeastAllocated',
        'expect': (
            '{"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-memory":"16Gi",'
            '"koordinator.sh/gpu-memory-ratio":"100"},"id":"123456-1"}]}'
        ),
        'fail': None,
        'note': (
            "upstream's fixture is a nodeDevice (deviceTotal/deviceUsed, deviceInfos without topology); here the "
            'same node as a Device CR plus an assigned pod. Reserve runs with the default scorer (LeastAllocated, '
            'weights gpu-memory-ratio, gpu-memory, rdma, fpga = 1); upstream compares structs (allocationResult) '
            'and PreBind adds the ids'
        ),
    },
    {
        'name': 'Test_Plugin_Reserve/sufficient device resource 5',
        'source': 'pkg/scheduler/plugins/deviceshare/plugin_test.go',
        'device': {
            'metadata': {'name': 'test-node'},
            'spec': {
                'devices': [
                    {
                        'type': 'gpu',
                        'id': '123456-1',
                        'minor': 0,
                        'health': True,
                        'resources': {
                            'huawei.com/npu-core': '8',
                            'huawei.com/npu-cpu': '7',
                            'huawei.com/npu-dvpp': '100',
                            'koordinator.sh/gpu-memory-ratio': '100',
                            'koordinator.sh/gpu-memory': '24Gi',
                        },
                    },
                ],
            },
        },
        'node': {
            'metadata': {
                'name': 'test-node',
                'labels': {'node.koordinator.sh/gpu-vendor': 'huawei', 'node.koordinator.sh/gpu-model': 'Ascend-310P'},
            },
        },
        'assigned': [],
        'pod': {
            'metadata': {'namespace': 'default', 'name': 'test-pod', 'uid': 'uid-test-pod'},
            'spec': {
                'containers': [
                    {
                        'name': 'main',
                        'resources': {
                            'requests': {'huawei.com/npu-core': '8', 'koordinator.sh/gpu-memory-ratio': '100'},
                        },
                    },
                ],
            },
        },
        'scored': True,
        'strategy': 'LeastAllocated',
        'expect': (
            '{"gpu":[{"minor":0,"resources":{"huawei.com/npu-core":"8","koordinator.sh/gpu-memory":"24Gi",'
            '"koordinator.sh/gpu-memory-ratio":"100"},"id":"123456-1"}]}'
        ),
        'fail': None,
        'note': (
            "upstream's fixture is a nodeDevice (deviceTotal/deviceUsed, deviceInfos without topology); here the "
            'same node as a Device CR plus an assigned pod. Reserve runs with the default scorer (LeastAllocated, '
            'weights gpu-memory-ratio, gpu-memory, rdma, fpga = 1); upstream compares structs (allocationResult) '
            'and PreBind adds the ids'
        ),
    },
]
