"""NRI's wire: one unix stream connection (the trunk) multiplexed into logical conns (:mod:`.mux`), each carrying
a ttRPC byte stream (:mod:`.ttrpc`). No Python library speaks either, so both are written here, on asyncio
protocols: frames are parsed synchronously as bytes arrive, requests run as tasks, nothing blocks a thread."""
