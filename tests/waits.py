import time
from collections.abc import Callable


def wait_for(predicate: Callable[[], object], timeout: float, step: float = 0.01) -> bool:
    """Poll until predicate() is truthy or the timeout passes (for deadlines the spec states)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(step)
    return False
