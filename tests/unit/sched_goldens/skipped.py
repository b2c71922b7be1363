"""Upstream test cases not turned into goldens, with the reason for each: (test, why)."""

SKIPPED = [
    [
        'device_allocator_test.go Test_allocateGPU',
        (
            "allocates from preemptible devices (the cards are fully used and a preemption victim's share is handed "
            "back); preemption is not part of the companion's allocator"
        ),
    ],
    ['device_allocator_test.go Test_failedPreemptGPUFromReservation', 'preemption from a reservation'],
    ['device_allocator_test.go Test_allocateRDMA', 'allocates from preemptible devices'],
    [
        'allocator_gpu_test.go TestAllocateByTemplate (all 4 cases)',
        (
            'Huawei vNPU shared-resource templates from the koordinator-system/gpu-shared-resource-templates '
            'ConfigMap; the template stage is not implemented'
        ),
    ],
    [
        (
            "plugin_test.go Test_Plugin_Filter 'insufficient device resource 6', 'sufficient device resource 8'; "
            "Test_Plugin_Reserve 'insufficient device resource 7', 'sufficient device resource 6'; "
            "Test_Plugin_PreFilter 'pod has invalid gpu request 5', 'pod has valid gpu request 7'"
        ),
        'gpu.shared + huawei.com/npu-* requests go through the template stage (see TestAllocateByTemplate)',
    ],
    [
        (
            "plugin_test.go Test_Plugin_Filter 'allocate from preemptible', 'allocate from reserved', 'allocate "
            "still successfully from node even if remaining of reserved are zero'; Test_Plugin_Reserve 'reserve "
            "from preemptible', 'reserve from reservation'"
        ),
        'preemption and Reservation objects',
    ],
    [
        (
            "plugin_test.go Test_Plugin_Filter 'allocate by designated, ...' (4 cases); Test_Plugin_Reserve "
            "'allocate by designated rdma, ...' (3 cases)"
        ),
        (
            'designated allocations are honoured only when the scheduling-hint plugin marks the cycle (PreFilter '
            'clears state.designatedAllocation otherwise); they also need a pre-set VF cache'
        ),
    ],
    [
        'plugin_test.go Test_Plugin_Filter hami-core and Ascend-310P3-300I-DUO cases',
        (
            'pod/node label checks and the gpuShareUnsupportedModels plugin argument, made in Filter before the '
            'allocator runs'
        ),
    ],
    [
        "plugin_test.go Test_Plugin_PreBind 'has the LabelGPUIsolationProvider label'",
        (
            'writes resources:null from an allocation with no resources, which the allocator never produces; the '
            'DevicePluginAdaption annotations are off by default'
        ),
    ],
    [
        "plugin_test.go Test_Plugin_PreBind 'empty state', 'state skip', 'DevicePluginAdaption feature enabled'",
        'framework state handling; the device-allocated value of the last one equals the first PreBind case',
    ],
    [
        (
            "utils_test.go TestValidateDeviceRequest 'invalid gpu request 2', 'invalid shared huawei npu request' "
            '(gpu.shared 2)'
        ),
        "five resource names in the reason, printed in Go's random map order (120 orders)",
    ],
    [
        (
            "utils_test.go TestValidateDeviceRequest 'empty pod request', 'invalid gpu request 14/15', 'valid "
            "huawei npu request', 'valid shared huawei npu request' (x2)"
        ),
        (
            'only the combination bitmask is checked upstream; an empty request never reaches validation, and the '
            'others need Huawei cards or templates to allocate'
        ),
    ],
    [
        (
            'utils_test.go TestConvertDeviceRequest, Test_parseGPURequirements, '
            'Test_preparePod_isReservationRequired; devicehandler_gpu_test.go Test_fillGPUTotalMem'
        ),
        (
            'internal conversions; their effect is covered by the allocation cases (normalized per-card requests, '
            'memory and ratio filled from the card)'
        ),
    ],
    [
        (
            'apis/extension/device_share_test.go TestGetGPUPartitionSpec, TestGetGPUPartitionTable, '
            'TestGetNodeLevelGPUAllocatePolicy'
        ),
        (
            'parser-level; their rules (empty spec = BestEffort, policy label Honor or else Prefer) are exercised '
            'by the derived partition cases'
        ),
    ],
    ['MIG', "koord-scheduler has no MIG case (deviceshare knows no MIG); MIG exclusion is this project's own rule"],
    [
        'scoring_test.go, topology_hint_test.go, reservation_test.go, eventhandler_*_test.go, device_cache_test.go',
        'node scores, NUMA hints, reservations and cache bookkeeping: not allocation outcomes',
    ],
]
