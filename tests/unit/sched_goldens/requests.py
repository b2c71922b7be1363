"""Golden cases for request validation and normalization: utils_test.go TestValidateDeviceRequest,
plugin_test.go Test_Plugin_PreFilter, devicehandler_gpu_test.go Test_calcDesiredRequestsAndCountForGPU and
devicehandler_default_test.go TestDefaultDeviceHandler_CalcDesiredRequestsAndCount, each run as a whole allocation."""

from tests.unit.sched_goldens.fixtures import (
    FAKE_DEVICE_CR_WITH_FAKES_NIC,
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
        'name': 'TestValidateDeviceRequest/invalid gpu request 1',
        'source': 'pkg/scheduler/plugins/deviceshare/utils_test.go',
        'device': SIMPLE_NODE_CR,
        'node': None,
        'assigned': [],
        'pod': {
            'metadata': {'namespace': 'default', 'name': 'test-pod', 'uid': 'uid-test-pod'},
            'spec': {'containers': [{'name': 'main', 'resources': {'requests': {'koordinator.sh/gpu-core': '101'}}}]},
        },
        'scored': False,
        'strategy': 'LeastAllocated',
        'expect': None,
        'fail': {
            'reason_any_of': ['invalid resource device requests: [koordinator.sh/gpu-core]'],
            'unresolvable': True,
        },
        'note': (
            "a PreFilter failure (UnschedulableAndUnresolvable, the error text as the reason); upstream's "
            'validation test checks only that it fails. When several names are listed Go prints them in map order, '
            "so any order is upstream's; gpu-core alone is not an allowed combination"
        ),
    },
    {
        'name': 'TestValidateDeviceRequest/invalid gpu request 3',
        'source': 'pkg/scheduler/plugins/deviceshare/utils_test.go',
        'device': SIMPLE_NODE_CR,
        'node': None,
        'assigned': [],
        'pod': {
            'metadata': {'namespace': 'default', 'name': 'test-pod', 'uid': 'uid-test-pod'},
            'spec': {'containers': [{'name': 'main', 'resources': {'requests': {'koordinator.sh/gpu': '101'}}}]},
        },
        'scored': False,
        'strategy': 'LeastAllocated',
        'expect': None,
        'fail': {'reason': 'invalid resource unit koordinator.sh/gpu: 101', 'unresolvable': True},
        'note': (
            "a PreFilter failure (UnschedulableAndUnresolvable, the error text as the reason); upstream's "
            'validation test checks only that it fails. When several names are listed Go prints them in map order, '
            "so any order is upstream's; koordinator.sh/gpu over 100 must be a multiple of 100"
        ),
    },
    {
        'name': 'TestValidateDeviceRequest/invalid gpu request 4',
        'source': 'pkg/scheduler/plugins/deviceshare/utils_test.go',
        'device': SIMPLE_NODE_CR,
        'node': None,
        'assigned': [],
        'pod': {
            'metadata': {'namespace': 'default', 'name': 'test-pod', 'uid': 'uid-test-pod'},
            'spec': {
                'containers': [
                    {
                        'name': 'main',
                        'resources': {
                            'requests': {'koordinator.sh/gpu-core': '100', 'koordinator.sh/gpu-memory-ratio': '101'},
                        },
                    },
                ],
            },
        },
        'scored': False,
        'strategy': 'LeastAllocated',
        'expect': None,
        'fail': {
            'reason_any_of': [
                'invalid resource device requests: [koordinator.sh/gpu-core koordinator.sh/gpu-memory-ratio]',
                'invalid resource device requests: [koordinator.sh/gpu-memory-ratio koordinator.sh/gpu-core]',
            ],
            'unresolvable': True,
        },
        'note': (
            "a PreFilter failure (UnschedulableAndUnresolvable, the error text as the reason); upstream's "
            'validation test checks only that it fails. When several names are listed Go prints them in map order, '
            "so any order is upstream's"
        ),
    },
    {
        'name': 'TestValidateDeviceRequest/invalid gpu request 8',
        'source': 'pkg/scheduler/plugins/deviceshare/utils_test.go',
        'device': SIMPLE_NODE_CR,
        'node': None,
        'assigned': [],
        'pod': {
            'metadata': {'namespace': 'default', 'name': 'test-pod', 'uid': 'uid-test-pod'},
            'spec': {
                'containers': [
                    {
                        'name': 'main',
                        'resources': {
                            'requests': {'koordinator.sh/gpu-memory-ratio': '101', 'koordinator.sh/gpu.shared': '1'},
                        },
                    },
                ],
            },
        },
        'scored': False,
        'strategy': 'LeastAllocated',
        'expect': None,
        'fail': {
            'reason_any_of': [
                'invalid resource device requests: [koordinator.sh/gpu-memory-ratio koordinator.sh/gpu.shared]',
                'invalid resource device requests: [koordinator.sh/gpu.shared koordinator.sh/gpu-memory-ratio]',
            ],
            'unresolvable': True,
        },
        'note': (
            "a PreFilter failure (UnschedulableAndUnresolvable, the error text as the reason); upstream's "
            'validation test checks only that it fails. When several names are listed Go prints them in map order, '
            "so any order is upstream's; ratio / gpu.shared over 100"
        ),
    },
    {
        'name': 'TestValidateDeviceRequest/invalid gpu request 9',
        'source': 'pkg/scheduler/plugins/deviceshare/utils_test.go',
        'device': SIMPLE_NODE_CR,
        'node': None,
        'assigned': [],
        'pod': {
            'metadata': {'namespace': 'default', 'name': 'test-pod', 'uid': 'uid-test-pod'},
            'spec': {
                'containers': [
                    {
                        'name': 'main',
                        'resources': {
                            'requests': {'koordinator.sh/gpu-memory-ratio': '101', 'koordinator.sh/gpu.shared': '2'},
                        },
                    },
                ],
            },
        },
        'scored': False,
        'strategy': 'LeastAllocated',
        'expect': None,
        'fail': {
            'reason_any_of': [
                'invalid resource device requests: [koordinator.sh/gpu-memory-ratio koordinator.sh/gpu.shared]',
                'invalid resource device requests: [koordinator.sh/gpu.shared koordinator.sh/gpu-memory-ratio]',
            ],
            'unresolvable': True,
        },
        'note': (
            "a PreFilter failure (UnschedulableAndUnresolvable, the error text as the reason); upstream's "
            'validation test checks only that it fails. When several names are listed Go prints them in map order, '
            "so any order is upstream's; ratio not a multiple of gpu.shared"
        ),
    },
    {
        'name': 'TestValidateDeviceRequest/invalid gpu request 10',
        'source': 'pkg/scheduler/plugins/deviceshare/utils_test.go',
        'device': SIMPLE_NODE_CR,
        'node': None,
        'assigned': [],
        'pod': {
            'metadata': {'namespace': 'default', 'name': 'test-pod', 'uid': 'uid-test-pod'},
            'spec': {
                'containers': [
                    {
                        'name': 'main',
                        'resources': {
                            'requests': {
                                'koordinator.sh/gpu-core': '101',
                                'koordinator.sh/gpu-memory': '64Gi',
                                'koordinator.sh/gpu.shared': '1',
                            },
                        },
                    },
                ],
            },
        },
        'scored': False,
        'strategy': 'LeastAllocated',
        'expect': None,
        'fail': {
            'reason_any_of': [
                (
                    'invalid resource device requests: [koordinator.sh/gpu-core koordinator.sh/gpu-memory '
                    'koordinator.sh/gpu.shared]'
                ),
                (
                    'invalid resource device requests: [koordinator.sh/gpu-core koordinator.sh/gpu.shared '
                    'koordinator.sh/gpu-memory]'
                ),
                (
                    'invalid resource device requests: [koordinator.sh/gpu-memory koordinator.sh/gpu-core '
                    'koordinator.sh/gpu.shared]'
                ),
                (
                    'invalid resource device requests: [koordinator.sh/gpu-memory koordinator.sh/gpu.shared '
                    'koordinator.sh/gpu-core]'
                ),
                (
                    'invalid resource device requests: [koordinator.sh/gpu.shared koordinator.sh/gpu-core '
                    'koordinator.sh/gpu-memory]'
                ),
                (
                    'invalid resource device requests: [koordinator.sh/gpu.shared koordinator.sh/gpu-memory '
                    'koordinator.sh/gpu-core]'
                ),
            ],
            'unresolvable': True,
        },
        'note': (
            "a PreFilter failure (UnschedulableAndUnresolvable, the error text as the reason); upstream's "
            'validation test checks only that it fails. When several names are listed Go prints them in map order, '
            "so any order is upstream's"
        ),
    },
    {
        'name': 'TestValidateDeviceRequest/invalid huawei npu request',
        'source': 'pkg/scheduler/plugins/deviceshare/utils_test.go',
        'device': SIMPLE_NODE_CR,
        'node': None,
        'assigned': [],
        'pod': {
            'metadata': {'namespace': 'default', 'name': 'test-pod', 'uid': 'uid-test-pod'},
            'spec': {
                'containers': [
                    {
                        'name': 'main',
                        'resources': {'requests': {'huawei.com/npu-core': '40', 'koordinator.sh/gpu-memory': '128Gi'}},
                    },
                ],
            },
        },
        'scored': False,
        'strategy': 'LeastAllocated',
        'expect': None,
        'fail': {
            'reason_any_of': [
                'invalid resource device requests: [huawei.com/npu-core koordinator.sh/gpu-memory]',
                'invalid resource device requests: [koordinator.sh/gpu-memory huawei.com/npu-core]',
            ],
            'unresolvable': True,
        },
        'note': (
            "a PreFilter failure (UnschedulableAndUnresolvable, the error text as the reason); upstream's "
            'validation test checks only that it fails. When several names are listed Go prints them in map order, '
            "so any order is upstream's"
        ),
    },
    {
        'name': 'TestValidateDeviceRequest/invalid shared huawei npu request (no npu-cpu)',
        'source': 'pkg/scheduler/plugins/deviceshare/utils_test.go',
        'device': SIMPLE_NODE_CR,
        'node': None,
        'assigned': [],
        'pod': {
            'metadata': {'namespace': 'default', 'name': 'test-pod', 'uid': 'uid-test-pod'},
            'spec': {
                'containers': [
                    {
                        'name': 'main',
                        'resources': {
                            'requests': {
                                'koordinator.sh/gpu.shared': '1',
                                'huawei.com/npu-core': '10',
                                'koordinator.sh/gpu-memory': '16Gi',
                            },
                        },
                    },
                ],
            },
        },
        'scored': False,
        'strategy': 'LeastAllocated',
        'expect': None,
        'fail': {
            'reason_any_of': [
                (
                    'invalid resource device requests: [koordinator.sh/gpu.shared huawei.com/npu-core '
                    'koordinator.sh/gpu-memory]'
                ),
                (
                    'invalid resource device requests: [koordinator.sh/gpu.shared koordinator.sh/gpu-memory '
                    'huawei.com/npu-core]'
                ),
                (
                    'invalid resource device requests: [huawei.com/npu-core koordinator.sh/gpu.shared '
                    'koordinator.sh/gpu-memory]'
                ),
                (
                    'invalid resource device requests: [huawei.com/npu-core koordinator.sh/gpu-memory '
                    'koordinator.sh/gpu.shared]'
                ),
                (
                    'invalid resource device requests: [koordinator.sh/gpu-memory koordinator.sh/gpu.shared '
                    'huawei.com/npu-core]'
                ),
                (
                    'invalid resource device requests: [koordinator.sh/gpu-memory huawei.com/npu-core '
                    'koordinator.sh/gpu.shared]'
                ),
            ],
            'unresolvable': True,
        },
        'note': (
            "a PreFilter failure (UnschedulableAndUnresolvable, the error text as the reason); upstream's "
            'validation test checks only that it fails. When several names are listed Go prints them in map order, '
            "so any order is upstream's (upstream's second case of this name)"
        ),
    },
    {
        'name': 'TestValidateDeviceRequest/invalid fpga request',
        'source': 'pkg/scheduler/plugins/deviceshare/utils_test.go',
        'device': SIMPLE_NODE_CR,
        'node': None,
        'assigned': [],
        'pod': {
            'metadata': {'namespace': 'default', 'name': 'test-pod', 'uid': 'uid-test-pod'},
            'spec': {'containers': [{'name': 'main', 'resources': {'requests': {'koordinator.sh/fpga': '201'}}}]},
        },
        'scored': False,
        'strategy': 'LeastAllocated',
        'expect': None,
        'fail': {'reason': 'invalid resource unit koordinator.sh/fpga: 201', 'unresolvable': True},
        'note': (
            "a PreFilter failure (UnschedulableAndUnresolvable, the error text as the reason); upstream's "
            'validation test checks only that it fails. When several names are listed Go prints them in map order, '
            "so any order is upstream's"
        ),
    },
    {
        'name': 'TestValidateDeviceRequest/invalid rdma request',
        'source': 'pkg/scheduler/plugins/deviceshare/utils_test.go',
        'device': SIMPLE_NODE_CR,
        'node': None,
        'assigned': [],
        'pod': {
            'metadata': {'namespace': 'default', 'name': 'test-pod', 'uid': 'uid-test-pod'},
            'spec': {'containers': [{'name': 'main', 'resources': {'requests': {'koordinator.sh/rdma': '201'}}}]},
        },
        'scored': False,
        'strategy': 'LeastAllocated',
        'expect': None,
        'fail': {'reason': 'invalid resource unit koordinator.sh/rdma: 201', 'unresolvable': True},
        'note': (
            "a PreFilter failure (UnschedulableAndUnresolvable, the error text as the reason); upstream's "
            'validation test checks only that it fails. When several names are listed Go prints them in map order, '
            "so any order is upstream's"
        ),
    },
    {
        'name': 'Test_Plugin_PreFilter/pod has invalid fpga request',
        'source': 'pkg/scheduler/plugins/deviceshare/plugin_test.go',
        'device': SIMPLE_NODE_CR,
        'node': None,
        'assigned': [],
        'pod': {
            'metadata': {'namespace': 'default', 'name': 'test-pod', 'uid': 'uid-test-pod'},
            'spec': {'containers': [{'name': 'main', 'resources': {'requests': {'koordinator.sh/fpga': '101'}}}]},
        },
        'scored': False,
        'strategy': 'LeastAllocated',
        'expect': None,
        'fail': {'reason': 'invalid resource unit koordinator.sh/fpga: 101', 'unresolvable': True},
        'note': 'upstream checks this exact status',
    },
    {
        'name': 'Test_Plugin_PreFilter/pod has invalid gpu request 1',
        'source': 'pkg/scheduler/plugins/deviceshare/plugin_test.go',
        'device': SIMPLE_NODE_CR,
        'node': None,
        'assigned': [],
        'pod': {
            'metadata': {'namespace': 'default', 'name': 'test-pod', 'uid': 'uid-test-pod'},
            'spec': {'containers': [{'name': 'main', 'resources': {'requests': {'koordinator.sh/gpu': '101'}}}]},
        },
        'scored': False,
        'strategy': 'LeastAllocated',
        'expect': None,
        'fail': {'reason': 'invalid resource unit koordinator.sh/gpu: 101', 'unresolvable': True},
        'note': 'upstream checks this exact status',
    },
    {
        'name': 'Test_Plugin_PreFilter/pod has invalid gpu request 2',
        'source': 'pkg/scheduler/plugins/deviceshare/plugin_test.go',
        'device': SIMPLE_NODE_CR,
        'node': None,
        'assigned': [],
        'pod': {
            'metadata': {'namespace': 'default', 'name': 'test-pod', 'uid': 'uid-test-pod'},
            'spec': {'containers': [{'name': 'main', 'resources': {'requests': {'koordinator.sh/gpu-core': '100'}}}]},
        },
        'scored': False,
        'strategy': 'LeastAllocated',
        'expect': None,
        'fail': {'reason': 'invalid resource device requests: [koordinator.sh/gpu-core]', 'unresolvable': True},
        'note': 'upstream checks this exact status',
    },
    {
        'name': 'Test_Plugin_PreFilter/pod has invalid gpu request 3',
        'source': 'pkg/scheduler/plugins/deviceshare/plugin_test.go',
        'device': SIMPLE_NODE_CR,
        'node': None,
        'assigned': [],
        'pod': {
            'metadata': {'namespace': 'default', 'name': 'test-pod', 'uid': 'uid-test-pod'},
            'spec': {
                'containers': [
                    {'name': 'main', 'resources': {'requests': {'koordinator.sh/gpu-memory-ratio': '101'}}},
                ],
            },
        },
        'scored': False,
        'strategy': 'LeastAllocated',
        'expect': None,
        'fail': {
            'reason': 'invalid resource device requests: [koordinator.sh/gpu-memory-ratio]',
            'unresolvable': True,
        },
        'note': 'upstream checks this exact status',
    },
    {
        'name': 'Test_Plugin_PreFilter/pod has invalid gpu request 4',
        'source': 'pkg/scheduler/plugins/deviceshare/plugin_test.go',
        'device': SIMPLE_NODE_CR,
        'node': None,
        'assigned': [],
        'pod': {
            'metadata': {'namespace': 'default', 'name': 'test-pod', 'uid': 'uid-test-pod'},
            'spec': {'containers': [{'name': 'main', 'resources': {'requests': {'huawei.com/npu-core': '8'}}}]},
        },
        'scored': False,
        'strategy': 'LeastAllocated',
        'expect': None,
        'fail': {'reason': 'invalid resource device requests: [huawei.com/npu-core]', 'unresolvable': True},
        'note': 'upstream checks this exact status',
    },
    {
        'name': 'Test_Plugin_PreFilter/skip zero requests',
        'source': 'pkg/scheduler/plugins/deviceshare/plugin_test.go',
        'device': SIMPLE_NODE_CR,
        'node': None,
        'assigned': [],
        'pod': {
            'metadata': {'namespace': 'default', 'name': 'test-pod', 'uid': 'uid-test-pod'},
            'spec': {'containers': [{'name': 'main', 'resources': {'requests': {'koordinator.sh/gpu': '0'}}}]},
        },
        'scored': False,
        'strategy': 'LeastAllocated',
        'expect': '',
        'fail': None,
        'note': (
            "a zero device request is dropped: the pod asks nothing of DeviceShare (expect '' = no device request, "
            'no annotation)'
        ),
    },
    {
        'name': 'TestValidateDeviceRequest/valid gpu request 2 (nvidia.com/gpu)',
        'source': 'pkg/scheduler/plugins/deviceshare/utils_test.go',
        'device': SIMPLE_NODE_CR,
        'node': None,
        'assigned': [],
        'pod': {
            'metadata': {'namespace': 'default', 'name': 'test-pod', 'uid': 'uid-test-pod'},
            'spec': {'containers': [{'name': 'main', 'resources': {'requests': {'nvidia.com/gpu': '2'}}}]},
        },
        'scored': False,
        'strategy': 'LeastAllocated',
        'expect': (
            '{"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"16Gi",'
            '"koordinator.sh/gpu-memory-ratio":"100"},"id":"GPU-00000000-0000-0000-0000-000000000000"},{"minor":1,'
            '"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"16Gi",'
            '"koordinator.sh/gpu-memory-ratio":"100"},"id":"GPU-11111111-1111-1111-1111-111111111111"}]}'
        ),
        'fail': None,
        'note': (
            'upstream checks the normalized request (or only the combination); the allocation is what that request '
            'gets on SIMPLE_NODE_CR (2 x 16Gi GPUs without topology, one NIC, one FPGA) in the Filter trial'
        ),
    },
    {
        'name': 'TestValidateDeviceRequest/valid hygon duc request 2',
        'source': 'pkg/scheduler/plugins/deviceshare/utils_test.go',
        'device': SIMPLE_NODE_CR,
        'node': None,
        'assigned': [],
        'pod': {
            'metadata': {'namespace': 'default', 'name': 'test-pod', 'uid': 'uid-test-pod'},
            'spec': {'containers': [{'name': 'main', 'resources': {'requests': {'dcu.com/gpu': '2'}}}]},
        },
        'scored': False,
        'strategy': 'LeastAllocated',
        'expect': (
            '{"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"16Gi",'
            '"koordinator.sh/gpu-memory-ratio":"100"},"id":"GPU-00000000-0000-0000-0000-000000000000"},{"minor":1,'
            '"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"16Gi",'
            '"koordinator.sh/gpu-memory-ratio":"100"},"id":"GPU-11111111-1111-1111-1111-111111111111"}]}'
        ),
        'fail': None,
        'note': (
            'upstream checks the normalized request (or only the combination); the allocation is what that request '
            'gets on SIMPLE_NODE_CR (2 x 16Gi GPUs without topology, one NIC, one FPGA) in the Filter trial'
        ),
    },
    {
        'name': 'TestValidateDeviceRequest/valid gpu request 2 (koordinator.sh/gpu)',
        'source': 'pkg/scheduler/plugins/deviceshare/utils_test.go',
        'device': SIMPLE_NODE_CR,
        'node': None,
        'assigned': [],
        'pod': {
            'metadata': {'namespace': 'default', 'name': 'test-pod', 'uid': 'uid-test-pod'},
            'spec': {'containers': [{'name': 'main', 'resources': {'requests': {'koordinator.sh/gpu': '200'}}}]},
        },
        'scored': False,
        'strategy': 'LeastAllocated',
        'expect': (
            '{"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"16Gi",'
            '"koordinator.sh/gpu-memory-ratio":"100"},"id":"GPU-00000000-0000-0000-0000-000000000000"},{"minor":1,'
            '"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"16Gi",'
            '"koordinator.sh/gpu-memory-ratio":"100"},"id":"GPU-11111111-1111-1111-1111-111111111111"}]}'
        ),
        'fail': None,
        'note': (
            'upstream checks the normalized request (or only the combination); the allocation is what that request '
            'gets on SIMPLE_NODE_CR (2 x 16Gi GPUs without topology, one NIC, one FPGA) in the Filter trial'
        ),
    },
    {
        'name': 'TestValidateDeviceRequest/valid gpu request 3',
        'source': 'pkg/scheduler/plugins/deviceshare/utils_test.go',
        'device': SIMPLE_NODE_CR,
        'node': None,
        'assigned': [],
        'pod': {
            'metadata': {'namespace': 'default', 'name': 'test-pod', 'uid': 'uid-test-pod'},
            'spec': {
                'containers': [
                    {
                        'name': 'main',
                        'resources': {
                            'requests': {'koordinator.sh/gpu-core': '200', 'koordinator.sh/gpu-memory': '64Gi'},
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
            'valid, but count stays 1 (no ratio, no gpu.shared): one card asked for core 200 and 64Gi, which no '
            'card has (calcDesiredRequestsAndCountForGPU counts cards from ratio or gpu.shared only)'
        ),
    },
    {
        'name': 'TestValidateDeviceRequest/valid gpu request 4',
        'source': 'pkg/scheduler/plugins/deviceshare/utils_test.go',
        'device': SIMPLE_NODE_CR,
        'node': None,
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
        'scored': False,
        'strategy': 'LeastAllocated',
        'expect': (
            '{"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"16Gi",'
            '"koordinator.sh/gpu-memory-ratio":"100"},"id":"GPU-00000000-0000-0000-0000-000000000000"},{"minor":1,'
            '"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"16Gi",'
            '"koordinator.sh/gpu-memory-ratio":"100"},"id":"GPU-11111111-1111-1111-1111-111111111111"}]}'
        ),
        'fail': None,
        'note': (
            'upstream checks the normalized request (or only the combination); the allocation is what that request '
            'gets on SIMPLE_NODE_CR (2 x 16Gi GPUs without topology, one NIC, one FPGA) in the Filter trial'
        ),
    },
    {
        'name': 'TestValidateDeviceRequest/valid gpu request 5',
        'source': 'pkg/scheduler/plugins/deviceshare/utils_test.go',
        'device': SIMPLE_NODE_CR,
        'node': None,
        'assigned': [],
        'pod': {
            'metadata': {'namespace': 'default', 'name': 'test-pod', 'uid': 'uid-test-pod'},
            'spec': {
                'containers': [
                    {'name': 'main', 'resources': {'requests': {'koordinator.sh/gpu-memory-ratio': '200'}}},
                ],
            },
        },
        'scored': False,
        'strategy': 'LeastAllocated',
        'expect': (
            '{"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-memory":"16Gi",'
            '"koordinator.sh/gpu-memory-ratio":"100"},"id":"GPU-00000000-0000-0000-0000-000000000000"},{"minor":1,'
            '"resources":{"koordinator.sh/gpu-memory":"16Gi","koordinator.sh/gpu-memory-ratio":"100"},'
            '"id":"GPU-11111111-1111-1111-1111-111111111111"}]}'
        ),
        'fail': None,
        'note': (
            'upstream checks the normalized request (or only the combination); the allocation is what that request '
            'gets on SIMPLE_NODE_CR (2 x 16Gi GPUs without topology, one NIC, one FPGA) in the Filter trial'
        ),
    },
    {
        'name': 'TestValidateDeviceRequest/valid gpu request 12',
        'source': 'pkg/scheduler/plugins/deviceshare/utils_test.go',
        'device': SIMPLE_NODE_CR,
        'node': None,
        'assigned': [],
        'pod': {
            'metadata': {'namespace': 'default', 'name': 'test-pod', 'uid': 'uid-test-pod'},
            'spec': {
                'containers': [
                    {
                        'name': 'main',
                        'resources': {
                            'requests': {'koordinator.sh/gpu-memory-ratio': '200', 'koordinator.sh/gpu.shared': '2'},
                        },
                    },
                ],
            },
        },
        'scored': False,
        'strategy': 'LeastAllocated',
        'expect': (
            '{"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-memory":"16Gi",'
            '"koordinator.sh/gpu-memory-ratio":"100"},"id":"GPU-00000000-0000-0000-0000-000000000000"},{"minor":1,'
            '"resources":{"koordinator.sh/gpu-memory":"16Gi","koordinator.sh/gpu-memory-ratio":"100"},'
            '"id":"GPU-11111111-1111-1111-1111-111111111111"}]}'
        ),
        'fail': None,
        'note': (
            'upstream checks the normalized request (or only the combination); the allocation is what that request '
            'gets on SIMPLE_NODE_CR (2 x 16Gi GPUs without topology, one NIC, one FPGA) in the Filter trial; 100 '
            'per card is not shared'
        ),
    },
    {
        'name': 'TestValidateDeviceRequest/valid gpu request 13',
        'source': 'pkg/scheduler/plugins/deviceshare/utils_test.go',
        'device': SIMPLE_NODE_CR,
        'node': None,
        'assigned': [],
        'pod': {
            'metadata': {'namespace': 'default', 'name': 'test-pod', 'uid': 'uid-test-pod'},
            'spec': {
                'containers': [
                    {
                        'name': 'main',
                        'resources': {
                            'requests': {'koordinator.sh/gpu-memory-ratio': '100', 'koordinator.sh/gpu.shared': '2'},
                        },
                    },
                ],
            },
        },
        'scored': False,
        'strategy': 'LeastAllocated',
        'expect': (
            '{"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-memory":"8Gi",'
            '"koordinator.sh/gpu-memory-ratio":"50"},"id":"GPU-00000000-0000-0000-0000-000000000000"},{"minor":1,'
            '"resources":{"koordinator.sh/gpu-memory":"8Gi","koordinator.sh/gpu-memory-ratio":"50"},'
            '"id":"GPU-11111111-1111-1111-1111-111111111111"}]}'
        ),
        'fail': None,
        'note': (
            'upstream checks the normalized request (or only the combination); the allocation is what that request '
            'gets on SIMPLE_NODE_CR (2 x 16Gi GPUs without topology, one NIC, one FPGA) in the Filter trial; 50 per '
            'card on 2 cards: a multi-card shared request'
        ),
    },
    {
        'name': 'TestValidateDeviceRequest/valid fpga request',
        'source': 'pkg/scheduler/plugins/deviceshare/utils_test.go',
        'device': SIMPLE_NODE_CR,
        'node': None,
        'assigned': [],
        'pod': {
            'metadata': {'namespace': 'default', 'name': 'test-pod', 'uid': 'uid-test-pod'},
            'spec': {'containers': [{'name': 'main', 'resources': {'requests': {'koordinator.sh/fpga': '50'}}}]},
        },
        'scored': False,
        'strategy': 'LeastAllocated',
        'expect': '{"fpga":[{"minor":0,"resources":{"koordinator.sh/fpga":"50"},"id":"0000:af:00.0"}]}',
        'fail': None,
        'note': (
            'upstream checks the normalized request (or only the combination); the allocation is what that request '
            'gets on SIMPLE_NODE_CR (2 x 16Gi GPUs without topology, one NIC, one FPGA) in the Filter trial'
        ),
    },
    {
        'name': 'TestValidateDeviceRequest/valid rdma request',
        'source': 'pkg/scheduler/plugins/deviceshare/utils_test.go',
        'device': SIMPLE_NODE_CR,
        'node': None,
        'assigned': [],
        'pod': {
            'metadata': {'namespace': 'default', 'name': 'test-pod', 'uid': 'uid-test-pod'},
            'spec': {'containers': [{'name': 'main', 'resources': {'requests': {'koordinator.sh/rdma': '50'}}}]},
        },
        'scored': False,
        'strategy': 'LeastAllocated',
        'expect': '{"rdma":[{"minor":0,"resources":{"koordinator.sh/rdma":"50"},"id":"0000:3b:00.0"}]}',
        'fail': None,
        'note': (
            'upstream checks the normalized request (or only the combination); the allocation is what that request '
            'gets on SIMPLE_NODE_CR (2 x 16Gi GPUs without topology, one NIC, one FPGA) in the Filter trial'
        ),
    },
    {
        'name': 'Test_Plugin_PreFilter/pod has valid gpu & rdma request',
        'source': 'pkg/scheduler/plugins/deviceshare/plugin_test.go',
        'device': SIMPLE_NODE_CR,
        'node': None,
        'assigned': [],
        'pod': {
            'metadata': {'namespace': 'default', 'name': 'test-pod', 'uid': 'uid-test-pod'},
            'spec': {
                'containers': [
                    {
                        'name': 'main',
                        'resources': {'requests': {'koordinator.sh/gpu': '100', 'koordinator.sh/rdma': '100'}},
                    },
                ],
            },
        },
        'scored': False,
        'strategy': 'LeastAllocated',
        'expect': (
            '{"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"16Gi",'
            '"koordinator.sh/gpu-memory-ratio":"100"},"id":"GPU-00000000-0000-0000-0000-000000000000"}],'
            '"rdma":[{"minor":0,"resources":{"koordinator.sh/rdma":"100"},"id":"0000:3b:00.0"}]}'
        ),
        'fail': None,
        'note': (
            'upstream checks the normalized request (or only the combination); the allocation is what that request '
            'gets on SIMPLE_NODE_CR (2 x 16Gi GPUs without topology, one NIC, one FPGA) in the Filter trial'
        ),
    },
    {
        'name': 'Test_calcDesiredRequestsAndCountForGPU/multi gpu share mode',
        'source': 'pkg/scheduler/plugins/deviceshare/devicehandler_gpu_test.go',
        'device': SIMPLE_NODE_CR,
        'node': None,
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
            '{"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":"50","koordinator.sh/gpu-memory":"8Gi",'
            '"koordinator.sh/gpu-memory-ratio":"50"},"id":"GPU-00000000-0000-0000-0000-000000000000"},{"minor":1,'
            '"resources":{"koordinator.sh/gpu-core":"50","koordinator.sh/gpu-memory":"8Gi",'
            '"koordinator.sh/gpu-memory-ratio":"50"},"id":"GPU-11111111-1111-1111-1111-111111111111"}]}'
        ),
        'fail': None,
        'note': (
            'upstream checks the normalized request (or only the combination); the allocation is what that request '
            'gets on SIMPLE_NODE_CR (2 x 16Gi GPUs without topology, one NIC, one FPGA) in the Filter trial'
        ),
    },
    {
        'name': 'Test_calcDesiredRequestsAndCountForGPU/gpu share mode',
        'source': 'pkg/scheduler/plugins/deviceshare/devicehandler_gpu_test.go',
        'device': SIMPLE_NODE_CR,
        'node': None,
        'assigned': [],
        'pod': {
            'metadata': {'namespace': 'default', 'name': 'test-pod', 'uid': 'uid-test-pod'},
            'spec': {
                'containers': [
                    {
                        'name': 'main',
                        'resources': {
                            'requests': {
                                'koordinator.sh/gpu.shared': '1',
                                'koordinator.sh/gpu-core': '50',
                                'koordinator.sh/gpu-memory-ratio': '50',
                            },
                        },
                    },
                ],
            },
        },
        'scored': False,
        'strategy': 'LeastAllocated',
        'expect': (
            '{"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":"50","koordinator.sh/gpu-memory":"8Gi",'
            '"koordinator.sh/gpu-memory-ratio":"50"},"id":"GPU-00000000-0000-0000-0000-000000000000"}]}'
        ),
        'fail': None,
        'note': (
            'upstream checks the normalized request (or only the combination); the allocation is what that request '
            'gets on SIMPLE_NODE_CR (2 x 16Gi GPUs without topology, one NIC, one FPGA) in the Filter trial'
        ),
    },
    {
        'name': 'Test_calcDesiredRequestsAndCountForGPU/gpu memory mode',
        'source': 'pkg/scheduler/plugins/deviceshare/devicehandler_gpu_test.go',
        'device': SIMPLE_NODE_CR,
        'node': None,
        'assigned': [],
        'pod': {
            'metadata': {'namespace': 'default', 'name': 'test-pod', 'uid': 'uid-test-pod'},
            'spec': {
                'containers': [
                    {
                        'name': 'main',
                        'resources': {
                            'requests': {'koordinator.sh/gpu-memory': '1Ki', 'koordinator.sh/gpu-core': '100'},
                        },
                    },
                ],
            },
        },
        'scored': False,
        'strategy': 'LeastAllocated',
        'expect': (
            '{"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"1Ki",'
            '"koordinator.sh/gpu-memory-ratio":"0"},"id":"GPU-00000000-0000-0000-0000-000000000000"}]}'
        ),
        'fail': None,
        'note': (
            'upstream checks the normalized request (or only the combination); the allocation is what that request '
            'gets on SIMPLE_NODE_CR (2 x 16Gi GPUs without topology, one NIC, one FPGA) in the Filter trial; 1024 '
            'bytes is int64(1024 / 16Gi x 100) = 0 percent: the ratio is written as "0"'
        ),
    },
    {
        'name': 'TestDefaultDeviceHandler_CalcDesiredRequestsAndCount/general request one NIC device',
        'source': 'pkg/scheduler/plugins/deviceshare/devicehandler_default_test.go',
        'device': FAKE_DEVICE_CR_WITH_FAKES_NIC,
        'node': {'metadata': {'name': 'test-node-1'}},
        'assigned': [],
        'pod': {
            'metadata': {'namespace': 'default', 'name': 'test-pod', 'uid': 'uid-test-pod'},
            'spec': {'containers': [{'name': 'main', 'resources': {'requests': {'koordinator.sh/rdma': '100'}}}]},
        },
        'scored': False,
        'strategy': 'LeastAllocated',
        'expect': '{"rdma":[{"minor":1,"resources":{"koordinator.sh/rdma":"100"},"id":"0000:1f:00.0"}]}',
        'fail': None,
        'note': (
            "upstream checks the handler's request and count on fakeDeviceCR plus a fakeS NIC (minor 5); the "
            'allocation is what they get in the Filter trial (no GPU requested)'
        ),
    },
    {
        'name': 'TestDefaultDeviceHandler_CalcDesiredRequestsAndCount/apply for all NIC devices that type is fakeW',
        'source': 'pkg/scheduler/plugins/deviceshare/devicehandler_default_test.go',
        'device': FAKE_DEVICE_CR_WITH_FAKES_NIC,
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
                },
            },
            'spec': {'containers': [{'name': 'main', 'resources': {'requests': {'koordinator.sh/rdma': '1'}}}]},
        },
        'scored': False,
        'strategy': 'LeastAllocated',
        'expect': (
            '{"rdma":[{"minor":1,"resources":{"koordinator.sh/rdma":"1"},"id":"0000:1f:00.0"},{"minor":2,'
            '"resources":{"koordinator.sh/rdma":"1"},"id":"0000:90:00.0"},{"minor":3,'
            '"resources":{"koordinator.sh/rdma":"1"},"id":"0000:51:00.0"},{"minor":4,'
            '"resources":{"koordinator.sh/rdma":"1"},"id":"0000:b9:00.0"}]}'
        ),
        'fail': None,
        'note': (
            "upstream checks the handler's request and count on fakeDeviceCR plus a fakeS NIC (minor 5); the "
            'allocation is what they get in the Filter trial (no GPU requested)'
        ),
    },
    {
        'name': 'TestDefaultDeviceHandler_CalcDesiredRequestsAndCount/apply for all NIC devices that type is fakeS',
        'source': 'pkg/scheduler/plugins/deviceshare/devicehandler_default_test.go',
        'device': FAKE_DEVICE_CR_WITH_FAKES_NIC,
        'node': {'metadata': {'name': 'test-node-1'}},
        'assigned': [],
        'pod': {
            'metadata': {
                'namespace': 'default',
                'name': 'test-pod',
                'uid': 'uid-test-pod',
                'annotations': {
                    'scheduling.koordinator.sh/device-allocate-hint': (
                        '{"rdma":{"selector":{"matchLabels":{"type":"fakeS"}},"allocateStrategy":"ApplyForAll"}}'
                    ),
                },
            },
            'spec': {'containers': [{'name': 'main', 'resources': {'requests': {'koordinator.sh/rdma': '1'}}}]},
        },
        'scored': False,
        'strategy': 'LeastAllocated',
        'expect': '{"rdma":[{"minor":5,"resources":{"koordinator.sh/rdma":"1"},"id":"123456789"}]}',
        'fail': None,
        'note': (
            "upstream checks the handler's request and count on fakeDeviceCR plus a fakeS NIC (minor 5); the "
            'allocation is what they get in the Filter trial (no GPU requested)'
        ),
    },
    {
        'name': 'TestDefaultDeviceHandler_CalcDesiredRequestsAndCount/apply for all NIC devices',
        'source': 'pkg/scheduler/plugins/deviceshare/devicehandler_default_test.go',
        'device': FAKE_DEVICE_CR_WITH_FAKES_NIC,
        'node': {'metadata': {'name': 'test-node-1'}},
        'assigned': [],
        'pod': {
            'metadata': {
                'namespace': 'default',
                'name': 'test-pod',
                'uid': 'uid-test-pod',
                'annotations': {
                    'scheduling.koordinator.sh/device-allocate-hint': (
                        '{"rdma":{"selector":{"matchExpressions":[{"key":"type","operator":"Exists"}]},'
                        '"allocateStrategy":"ApplyForAll"}}'
                    ),
                },
            },
            'spec': {'containers': [{'name': 'main', 'resources': {'requests': {'koordinator.sh/rdma': '1'}}}]},
        },
        'scored': False,
        'strategy': 'LeastAllocated',
        'expect': (
            '{"rdma":[{"minor":1,"resources":{"koordinator.sh/rdma":"1"},"id":"0000:1f:00.0"},{"minor":2,'
            '"resources":{"koordinator.sh/rdma":"1"},"id":"0000:90:00.0"},{"minor":3,'
            '"resources":{"koordinator.sh/rdma":"1"},"id":"0000:51:00.0"},{"minor":4,'
            '"resources":{"koordinator.sh/rdma":"1"},"id":"0000:b9:00.0"},{"minor":5,'
            '"resources":{"koordinator.sh/rdma":"1"},"id":"123456789"}]}'
        ),
        'fail': None,
        'note': (
            "upstream checks the handler's request and count on fakeDeviceCR plus a fakeS NIC (minor 5); the "
            'allocation is what they get in the Filter trial (no GPU requested)'
        ),
    },
    {
        'name': 'TestDefaultDeviceHandler_CalcDesiredRequestsAndCount/apply for all unmatched NIC devices',
        'source': 'pkg/scheduler/plugins/deviceshare/devicehandler_default_test.go',
        'device': FAKE_DEVICE_CR_WITH_FAKES_NIC,
        'node': {'metadata': {'name': 'test-node-1'}},
        'assigned': [],
        'pod': {
            'metadata': {
                'namespace': 'default',
                'name': 'test-pod',
                'uid': 'uid-test-pod',
                'annotations': {
                    'scheduling.koordinator.sh/device-allocate-hint': (
                        '{"rdma":{"selector":{"matchExpressions":[{"key":"non-exists-label","operator":"Exists"}]},'
                        '"allocateStrategy":"ApplyForAll"}}'
                    ),
                },
            },
            'spec': {'containers': [{'name': 'main', 'resources': {'requests': {'koordinator.sh/rdma': '1'}}}]},
        },
        'scored': False,
        'strategy': 'LeastAllocated',
        'expect': None,
        'fail': {'reason': 'Insufficient rdma devices', 'unresolvable': True},
        'note': 'ApplyForAll with a selector that matches no NIC: unresolvable',
    },
    {
        'name': 'TestDefaultDeviceHandler_CalcDesiredRequestsAndCount/request as count',
        'source': 'pkg/scheduler/plugins/deviceshare/devicehandler_default_test.go',
        'device': FAKE_DEVICE_CR_WITH_FAKES_NIC,
        'node': {'metadata': {'name': 'test-node-1'}},
        'assigned': [],
        'pod': {
            'metadata': {
                'namespace': 'default',
                'name': 'test-pod',
                'uid': 'uid-test-pod',
                'annotations': {
                    'scheduling.koordinator.sh/device-allocate-hint': (
                        '{"rdma":{"allocateStrategy":"RequestsAsCount"}}'
                    ),
                },
            },
            'spec': {'containers': [{'name': 'main', 'resources': {'requests': {'koordinator.sh/rdma': '4'}}}]},
        },
        'scored': False,
        'strategy': 'LeastAllocated',
        'expect': (
            '{"rdma":[{"minor":1,"resources":{"koordinator.sh/rdma":"1"},"id":"0000:1f:00.0"},{"minor":2,'
            '"resources":{"koordinator.sh/rdma":"1"},"id":"0000:90:00.0"},{"minor":3,'
            '"resources":{"koordinator.sh/rdma":"1"},"id":"0000:51:00.0"},{"minor":4,'
            '"resources":{"koordinator.sh/rdma":"1"},"id":"0000:b9:00.0"}]}'
        ),
        'fail': None,
        'note': (
            "upstream checks the handler's request and count on fakeDeviceCR plus a fakeS NIC (minor 5); the "
            'allocation is what they get in the Filter trial (no GPU requested); rdma 4 = 4 NICs of rdma 1 each'
        ),
    },
    {
        'name': 'TestDefaultDeviceHandler_CalcDesiredRequestsAndCount/request as count and exclusive',
        'source': 'pkg/scheduler/plugins/deviceshare/devicehandler_default_test.go',
        'device': FAKE_DEVICE_CR_WITH_FAKES_NIC,
        'node': {'metadata': {'name': 'test-node-1'}},
        'assigned': [],
        'pod': {
            'metadata': {
                'namespace': 'default',
                'name': 'test-pod',
                'uid': 'uid-test-pod',
                'annotations': {
                    'scheduling.koordinator.sh/device-allocate-hint': (
                        '{"rdma":{"allocateStrategy":"RequestsAsCount","exclusivePolicy":"DeviceLevel"}}'
                    ),
                },
            },
            'spec': {'containers': [{'name': 'main', 'resources': {'requests': {'koordinator.sh/rdma': '4'}}}]},
        },
        'scored': False,
        'strategy': 'LeastAllocated',
        'expect': (
            '{"rdma":[{"minor":1,"resources":{"koordinator.sh/rdma":"100"},"id":"0000:1f:00.0"},{"minor":2,'
            '"resources":{"koordinator.sh/rdma":"100"},"id":"0000:90:00.0"},{"minor":3,'
            '"resources":{"koordinator.sh/rdma":"100"},"id":"0000:51:00.0"},{"minor":4,'
            '"resources":{"koordinator.sh/rdma":"100"},"id":"0000:b9:00.0"}]}'
        ),
        'fail': None,
        'note': (
            "upstream checks the handler's request and count on fakeDeviceCR plus a fakeS NIC (minor 5); the "
            'allocation is what they get in the Filter trial (no GPU requested); DeviceLevel makes each of the 4 a '
            'whole NIC'
        ),
    },
]
