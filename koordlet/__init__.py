"""koordlet-py: a Koordinator-compatible node agent for QoS and device enforcement."""

__version__ = "0.1.0"
