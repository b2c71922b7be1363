"""Reporters: NodeMetric status, NodeResourceTopology and Device objects, to the API server or to files."""
